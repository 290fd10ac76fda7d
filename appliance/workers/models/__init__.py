"""The models and their numerics: fc_mnist and GPT-2 in NumPy, optimizers, the corpus, the
single-process reference trainer, and the rules that keep every process's bits equal."""
