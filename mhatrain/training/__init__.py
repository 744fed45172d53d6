"""Layer 5, making a model: the update step, its loss, the training loop with validation, checkpoints and
resume, the progress display and TensorBoard scalars, and checkpoint averaging. Imports the layers above."""
