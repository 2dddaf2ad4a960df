"""The text on its way to a batch: the corpora and their splits (corpus.py: Multi30k, a user's files, the sample),
the built-in sample grammar with its gold alignments (sample.py), subword vocabularies and datasets (data.py),
batches by tokens (batches.py), and word alignments with their error rate (aer.py)."""
