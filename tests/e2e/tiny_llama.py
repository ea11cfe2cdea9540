"""A tiny random Llama with a Llama-3-style tokenizer and a ChatML chat template, saved as a Hugging Face directory
(the tokenizer trained on the repo's KJV text by tests/reference/text_support.py; nothing is downloaded), and
transformers' greedy generate on it: the reference the serving tests (serve_test.py, generate_batch_test.py)
compare meshtrain's tokens with (imported from the tests' own folder)."""
import os
import sys

import torch
import transformers
from transformers import PreTrainedTokenizerFast

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def make_tiny_llama(src, work, max_positions=128):
    """Saves the model and its tokenizer under WORK/hf; returns (hf_dir, model, tokenizer)."""
    sys.path.insert(0, os.path.join(src, "tests", "reference"))
    from text_support import train_tokenizer  # noqa: E402
    base = train_tokenizer("llama3", os.path.join(src, "data", "kjv", "kjv-genesis-2kings.txt"),
                           os.path.join(work, "tok"))
    tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    tok.chat_template = CHATML
    cfg = transformers.LlamaConfig(vocab_size=base.get_vocab_size(with_added_tokens=True), hidden_size=64,
                                   intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=max_positions, rms_norm_eps=1e-5,
                                   rope_theta=10000.0, tie_word_embeddings=False,
                                   bos_token_id=tok.convert_tokens_to_ids("<|begin_of_text|>"),
                                   eos_token_id=tok.convert_tokens_to_ids("<|eot_id|>"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():  # larger weights than the init, so greedy decoding is far from ties
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    hf_dir = os.path.join(work, "hf")
    model.save_pretrained(hf_dir)
    tok.save_pretrained(hf_dir)
    return hf_dir, model, tok


def greedy_ids(model, ids, new_tokens):
    """transformers' greedy continuation of `ids`: the new ids, an end-of-text id kept."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=model.config.eos_token_id, pad_token_id=model.config.eos_token_id)
    return out[0, len(ids):].tolist()


def chat_ids(tok, messages):
    """The token ids of `messages` rendered by the tokenizer's chat template, the assistant's turn opened."""
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])
