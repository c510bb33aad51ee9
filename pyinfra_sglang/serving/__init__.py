"""How a model profile runs on a host's GPUs: the profile and its per-architecture tables,
``place()`` (the one decision of the resolved profile, TP size and layout), the memory fit,
SGLang's flag spellings per release, and the unit and files rendered from a Placement."""
