"""HF config of an exported valuepath model of any value path (loaded with trust_remote_code=True).

`scripts/hf_convert.py export` copies this file into the model directory. The model's shapes and
value path travel whole in `valuepath` (the fields of the Config dataclass of
valuepath_checkpoint.py, i.e. host/config.h's ModelConfig); the HF-side fields that generation and
evaluation tools read (vocab_size, max_position_embeddings) are derived from it.
"""

from transformers import PretrainedConfig


class ValuepathConfig(PretrainedConfig):
    model_type = "valuepath"

    def __init__(self, valuepath=None, **kwargs):
        self.valuepath = dict(valuepath or {})
        self.vocab_size = self.valuepath.get("vocab_size")
        self.max_position_embeddings = self.valuepath.get("max_seq_len")
        self.num_hidden_layers = self.valuepath.get("n_layer")
        self.hidden_size = self.valuepath.get("n_embd")
        self.num_attention_heads = self.valuepath.get("n_head")
        kwargs["use_cache"] = False  # no KV cache: every step recomputes the whole prefix
        kwargs["tie_word_embeddings"] = False  # the model reads its own head tensor; nothing for HF to tie
        super().__init__(**kwargs)
