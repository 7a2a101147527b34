"""HF transformers model of an exported valuepath checkpoint of any value path (vanilla, ResFormer,
SVFormer, Skip-Layer Attention, Depth-Attention), loaded with trust_remote_code=True:

    model = AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

`scripts/hf_convert.py export` copies this file into the model directory with three more:
configuration_valuepath.py, valuepath_model.py (the project's independent PyTorch reference,
dev/reference/model.py, whose forward is checked against the C++ trainers in the repository's
tests) and valuepath_checkpoint.py (the layout it reads). The parameters keep valuepath's names
and shapes (host/params.h) as `params.NAME`, so nothing is remapped and every path's math is the
reference's own.

Limits, each an error rather than a wrong result: batches padded on the right only (what
lm-evaluation-harness does for log-likelihoods; left padding would shift the positions), sequences
up to the model's max_seq_len, and no KV cache (generation recomputes the prefix each token).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_valuepath import ValuepathConfig
from .valuepath_model import Config, forward_tensors, param_offsets


class ValuepathForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = ValuepathConfig
    base_model_prefix = "valuepath"
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        self.vp = Config(**config.valuepath).validate()
        self.params = nn.ParameterDict({name: nn.Parameter(torch.zeros(shape))
                                        for name, shape, _, _ in param_offsets(self.vp)[0]})
        self.post_init()

    def _init_weights(self, module):
        pass  # the weights always come from the exported file

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        """input_ids (B, T) -> logits (B, T, V); with labels (B, T) (HF convention: the labels are
        the inputs, shifted here; -100 ignored), the mean cross-entropy as `loss`."""
        if attention_mask is not None and (attention_mask[:, 1:] > attention_mask[:, :-1]).any():
            raise ValueError("valuepath's HF model supports right padding only (tokenizer.padding_side = 'right'); "
                             "left padding would move every real token to another position")
        if input_ids.shape[1] > self.vp.max_seq_len:
            raise ValueError(f"{input_ids.shape[1]} tokens exceed the model's max_seq_len {self.vp.max_seq_len}")
        logits, _ = forward_tensors(self.vp, dict(self.params.items()), input_ids)
        loss = None
        if labels is not None:
            wide = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16/fp16 logits: the loss in fp32
            loss = F.cross_entropy(wide[:, :-1].reshape(-1, wide.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}
