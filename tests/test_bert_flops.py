"""Training FLOPs per example: the masked-LM step's count, checked against its sizes by hand."""

from models import bert
from models.bert.memory import bert_flops
from models.bert.pretraining import mlm_head


def test_the_masked_lm_step_counts_its_encoder_and_its_head_at_the_masked_positions_only():
    config = bert.bert_config("tiny", vocab_size=100)
    seq, predictions = 16, 3
    model = mlm_head.build_pretraining_model(config, seq, predictions)
    h, i, layers, v = config.hidden_size, config.intermediate_size, config.num_layers, 100
    # A layer: q, k, v, output projections; two layer norms; the feed-forward pair.
    layer = 4 * (h * h + h) + 2 * (2 * h) + (h * i + i) + (i * h + h)
    encoder = 6 * layers * layer * seq + 12 * layers * seq**2 * h  # No pooler, no embeddings.
    head = 6 * ((h * h + h) + 2 * h + v + v * h) * predictions  # Dense, norm, bias, the tie.
    assert bert_flops.pretraining_flops_per_example(model, seq, predictions) == encoder + head
