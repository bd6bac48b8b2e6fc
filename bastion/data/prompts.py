"""Turning dataset turns into token ids, with or without a chat template.

Chat models get every turn through their chat template (Qwen3 with ``enable_thinking``
off unless asked); the rendered text already holds the template's special tokens, so
it is encoded without adding more (the original harness added a second BOS for Llama).
A tokenizer without a chat template, such as the bundled tiny code model's, gets the
raw text: earlier turns and answers are simply concatenated.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence


class PromptBuilder:
    def __init__(self, tokenizer: Any, enable_thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.has_template = bool(getattr(tokenizer, "chat_template", None))

    def text(self, history: Sequence[tuple[str, str]], user: str) -> str:
        if self.has_template:
            messages: list[dict[str, str]] = []
            for u, a in history:
                messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            messages.append({"role": "user", "content": user})
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.enable_thinking
            )
        return "".join(u + a + "\n" for u, a in history) + user

    def token_ids(self, history: Sequence[tuple[str, str]], user: str) -> list[int]:
        return list(self.tokenizer(self.text(history, user), add_special_tokens=not self.has_template)["input_ids"])

    def encode(self, history: Sequence[tuple[str, str]], user: str) -> list[int]:
        ids = self.token_ids(history, user)
        if not ids:
            raise ValueError("a prompt encoded to zero tokens")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def longest_context(self, prompts: Iterable[Mapping[str, Any]], max_new_tokens: int) -> int:
        """Positions the longest prompt can reach: every turn (earlier answers empty) plus
        ``max_new_tokens`` per turn, an upper bound that sizes calibration and buffers."""
        longest = 0
        for i, prompt in enumerate(prompts):
            turns = list(prompt["turns"])
            for k in range(len(turns)):  # every turn's prompt, so an empty one is named before decoding starts
                ids = self.token_ids([(t, "") for t in turns[:k]], turns[k])
                if not ids:
                    raise ValueError(
                        f"prompt {i} of {prompt.get('dataset', 'the dataset')} encodes to zero tokens at turn {k} "
                        f"({turns[k]!r}, and the tokenizer has no chat template to wrap it); give every turn some text")
            longest = max(longest, len(ids) + max_new_tokens * len(turns))
        return longest

    def stop_ids(self, target: Any) -> list[int]:
        """The tokenizer's EOS plus the model's generation-config EOS ids."""
        ids = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen = getattr(target.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        if eos is not None:
            ids.update(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
        return sorted(ids)
