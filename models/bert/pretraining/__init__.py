"""BERT pretraining: the masked-language model from your own text, with exact resume.

Modules, in reading order:
  text_corpus.py  .txt files -> WordPiece tokens -> full packed sequences (RoBERTa's
                  FULL-SENTENCES, [SEP] between documents), each with its corpus index
  masking.py      Masker: 15% of non-special tokens (or whole words), 80/10/10,
                  max_predictions_per_seq, every mask a pure function of (seed, epoch,
                  example) (stateless ops)
  mlm_head.py     BERT's masked-LM head (tied output projection), its loss over masked
                  positions only, masked-token accuracy and perplexity
  start_points.py where a run starts: a preset from scratch (its vocabulary given or
                  learned), or a Hugging Face folder (--from_hf: its encoder, vocabulary
                  and casing; its masked-LM head, or a fresh one, said in one line)
  mlm_export.py   the export: a fill-mask SavedModel (text with [MASK] in, top-k out),
                  the TF Hub encoder and preprocessing for train_bert.py inside
  mlm_task.py     the "bert_mlm" task: BertMlmConfig, bert_mlm_task, pretrain_bert
  fill_mask_rows.py  fill-mask rows (each [MASK]'s top-k tokens) from a run's model or
                  its export, the texts checked by line (scripts/predict.py)

Guarantee: a run resumed after SIGKILL masks every example as the uninterrupted run did
(the masker is the Task's `augment`, seeded by the engine's per-example stream seeds and
each sequence's corpus index) and drops the units it dropped (the encoder's dropout is
content-seeded, mlm_head.py), so it ends at the same weights; evaluation masks are fixed.

Entry points: `keras_tpu.fit("bert_mlm", BertMlmConfig(...))`, `scripts/train.py
--task=bert_mlm`, `scripts/pretrain_bert.py`. docs/pretraining.md is the guide.
"""
