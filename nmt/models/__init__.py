"""The models: the one contract every family speaks (model.py), the attention mechanisms of the papers
(attention.py), the recurrent families of Sutskever, Bahdanau and Luong (rnn.py, on unpacked.py's recurrences) and
the Transformer (transformer.py), their dropout, the FLOPs each forward and backward costs (flops.py), and the
options each model and attention takes (options.py). They import nothing of the toolkit but each other."""
