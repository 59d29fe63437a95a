"""The built-in tasks (the CNN and the BERT classifier), built on keras_tpu's public engine."""
