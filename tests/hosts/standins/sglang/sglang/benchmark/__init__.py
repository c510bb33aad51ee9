"""SGLang's benchmarks (the stand-in has the serving one, from 0.5.15 on)."""
