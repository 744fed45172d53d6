"""Layer 2, text to batches: sources of sentence pairs, the SentencePiece tokenizer, token-id tables and
their cache, and length-bucketed batches. Imports only core."""
