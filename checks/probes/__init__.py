"""Scripts shipped to GPU hosts and run there with the SGLang venv's Python; each one's
docstring says what it needs and what it prints. None changes the host."""
