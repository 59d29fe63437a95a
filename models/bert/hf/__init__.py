"""A pretrained Hugging Face BERT brought into the TF Hub format, without PyTorch.

A Hugging Face BERT folder (config.json, tokenizer files, safetensors; never pickles)
becomes the native encoder of models/bert with every tensor assigned, exported with its
WordPiece preprocessing as a pair of TF Hub SavedModels.

Modules, in reading order:
  hf_bert.py     export_hf_bert: the whole conversion, explained
  hf_config.py   config.json and the tokenizer's settings as a BertConfig
  hf_weights.py  the checkpoint's safetensors read and assigned to the native encoder

Entry points: `hf_bert.export_hf_bert`, `hf_bert.export_preset_bert` (scripts/export_bert_hub.py).
"""
