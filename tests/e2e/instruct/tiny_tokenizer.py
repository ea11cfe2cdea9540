"""A tiny byte-level BPE tokenizer trained here, offline, on the KJV text in data/kjv, saved as a Hugging Face
tokenizer directory with a ChatML chat template — what the instruction-data tests tokenize with (nothing is
fetched).

    make_tokenizer(src_dir, out_dir, template="chatml" | "generation" | "unstable" | "broken" | "raises", vocab=512)

chatml: the usual ChatML template (prefix-stable: turn-by-turn rendering marks the assistant's span);
generation: the same with {% generation %} markers; unstable: one that repeats the last message's role in a
header, so each rendering changes the text before it (neither way can mark the span); broken: one that does not
compile; raises: one that raises (as templates refusing a turn order do).
"""
import json
import os

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GENERATION = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
              "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}{{ '\\n' }}{% else %}{{ m['content'] }}"
              "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
UNSTABLE = ("<|im_start|>system\n{{ messages | length }} turns<|im_end|>\n" + CHATML)
BROKEN = "{% for m in messages %}{{ m['role'] }{% endfor %}"  # does not compile
RAISES = "{{ raise_exception('Conversation roles must alternate user/assistant') }}" + CHATML
TEMPLATES = {"chatml": CHATML, "generation": GENERATION, "unstable": UNSTABLE, "broken": BROKEN, "raises": RAISES}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def kjv_lines(src_dir, n=4000):
    path = os.path.join(src_dir, "data", "kjv", "kjv-genesis-2kings.txt")
    with open(path, encoding="utf-8") as f:
        return [line for _, line in zip(range(n), f)]


def make_tokenizer(src_dir, out_dir, template="chatml", vocab=512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(kjv_lines(src_dir), trainer)
    os.makedirs(out_dir, exist_ok=True)
    tk.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                   "bos_token": None, "pad_token": "<|endoftext|>", "chat_template": TEMPLATES[template]}, f)
    return out_dir
