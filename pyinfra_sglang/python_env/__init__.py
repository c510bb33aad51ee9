"""The Python environment's plans: the install order of the SGLang stack for a CUDA
release (python_stack.py) and the flash-attn build bounded by the host's memory
(flash_attn_build_plan.py)."""
