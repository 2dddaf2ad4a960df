"""From a trained model to text: the translator and its decoding of a split (translator.py), greedy and beam search
(search.py), the evaluate and translate commands' work (evaluate.py), attention as word alignments (alignment.py) and
as figures (plot.py), and the Transformer's export to CTranslate2 with its engine (export/)."""
