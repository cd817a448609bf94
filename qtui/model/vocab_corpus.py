"""A small deterministic training corpus for the synthetic models' BPE vocabulary.

Varied enough that a ~2000-token byte-level BPE learns sensible pieces for English prose, Python and
shell code, numbers, Chinese and Japanese, and emoji (including ZWJ sequences). `make_corpus(seed)`
returns the same list of strings for the same seed; different seeds reorder and recombine the pieces.
"""

from __future__ import annotations

import random
import re

_PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a village by the sea, there lived an old fisherman and his wife.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Language models predict the next token given all the tokens that came before it.",
    "Please write a short poem about the moon, the stars, and the quiet night.",
    "Continuous batching lets a server run many requests together without waiting for the slowest one.",
    "The weather today is sunny with a light breeze from the west; tomorrow may bring rain.",
    'She said, "I don\'t think we\'re going to make it in time," and he replied, "We\'ll see."',
    "What's the capital of France? Paris is the capital, and it's known for the Eiffel Tower.",
    "Scientists have discovered a new species of frog in the rainforests of South America.",
    "Remember to drink water, get enough sleep, and take a walk outside every day.",
    "The committee will meet on Monday at 10:30 to discuss the budget for the next quarter.",
    "Hello! How can I help you today? I'm happy to answer questions or explain anything.",
    "Mathematics is the language in which the laws of nature are written, some people say.",
    "A good explanation starts simple, adds detail step by step, and ends with an example.",
]

_SUBJECTS = [
    "The model",
    "Our team",
    "A student",
    "The server",
    "This function",
    "My friend",
    "The system",
    "Every request",
    "The engine",
    "A careful reader",
    "The scheduler",
    "Each layer",
]
_VERBS = [
    "computes",
    "returns",
    "explains",
    "describes",
    "measures",
    "prints",
    "stores",
    "reads",
    "writes",
    "compares",
    "predicts",
    "generates",
    "loads",
    "checks",
    "updates",
    "handles",
    "answers",
]
_OBJECTS = [
    "the result",
    "a long story",
    "every token",
    "the final answer",
    "the memory usage",
    "the first layer",
    "an important question",
    "the hidden state",
    "a simple example",
    "the attention weights",
    "the training data",
    "a new request",
    "the output buffer",
]
_TAILS = [
    "quickly.",
    "without errors.",
    "in a single pass.",
    "for each user.",
    "before the deadline.",
    "on the GPU.",
    "with great care.",
    "every second.",
    "as expected.",
    "when asked.",
]

_CODE = [
    "def main(argv: list[str]) -> int:\n    parser = argparse.ArgumentParser()\n    return 0\n",
    "import numpy as np\n\nx = np.zeros((4, 8), dtype=np.float32)\ny = x @ x.T\nprint(y.shape)\n",
    'for i in range(10):\n    if i % 2 == 0:\n        print(f"even: {i}")\n    else:\n        continue\n',
    "class Request:\n    def __init__(self, request_id, prompt):\n        self.request_id = request_id\n"
    "        self.prompt = prompt\n",
    "async def handler(websocket):\n    async for message in websocket:\n        await websocket.send(message)\n",
    '#include <stdio.h>\n\nint main(void) {\n    printf("Hello, world!\\n");\n    return 0;\n}\n',
    'fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
    "$ pip install -e .\n$ pytest tests -x -q\n$ git status && git diff --stat\n",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name ORDER BY name;\n",
    '{"type": "generate", "id": "r1", "max_tokens": 64, "stop": ["\\n\\n"]}\n',
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3));\n",
    "try:\n    value = int(text)\nexcept ValueError as exc:\n    raise BadRequest(str(exc)) from exc\n",
]
_IDENTIFIERS = [
    "token_ids",
    "num_slots",
    "max_tokens",
    "hidden_size",
    "self",
    "return",
    "None",
    "True",
    "False",
    "import",
    "from",
    "lambda",
    "yield",
    "assert",
    "tensor",
    "shape",
    "dtype",
    "logits",
]

_CJK = [
    "你好，世界！今天天气很好。",
    "我们一起学习人工智能和机器学习。",
    "这个模型可以回答问题并生成文本。",
    "中国的首都是北京，上海是最大的城市。",
    "请用简单的语言解释一下这个问题。",
    "谢谢你的帮助，我非常感激。",
    "こんにちは、元気ですか？",
    "私は日本語を勉強しています。",
    "東京は日本の首都です。",
    "ありがとうございます。またね！",
    "안녕하세요, 만나서 반갑습니다.",
    "한국어도 조금 할 수 있어요.",
]
_EMOJI = [
    "😀",
    "😂",
    "🥲",
    "👍",
    "👍🏽",
    "🎉",
    "🚀",
    "❤️",
    "🔥",
    "✨",
    "🤖",
    "🐍",
    "🌍",
    "☕",
    "👨‍👩‍👧‍👦",
    "👩‍💻",
    "🏳️‍🌈",
    "🇫🇷",
    "🇯🇵",
    "🧑🏾‍🚀",
]
_MISC = [
    "Ünïcödé façade naïve café résumé — “quotes” ‘single’ … ±×÷ ≤ ≥ ≠ ∞ € £ ¥ °C",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "tab\tseparated\tvalues\n",
    "  indented  with   spaces   \n\n\n",
    "line one\r\nline two\r\n",
]


def make_corpus(seed: int = 0, n_sentences: int = 3000) -> list[str]:
    """Deterministic corpus (a list of documents) for BPE training; about 300 KB of text."""
    rng = random.Random(seed)
    docs = list(_PROSE) + list(_CODE) + list(_CJK) + list(_MISC)
    for _ in range(n_sentences):
        sentence = " ".join([rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_TAILS)])
        if rng.random() < 0.3:
            sentence += " " + rng.choice(_PROSE)
        if rng.random() < 0.2:
            sentence += " " + "".join(rng.choice(_EMOJI) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.15:
            sentence += " " + rng.choice(_CJK)
        if rng.random() < 0.2:
            sentence += f" {rng.randint(0, 10 ** rng.randint(1, 7))} {rng.random():.4f}"
        docs.append(sentence)
    for _ in range(n_sentences // 4):
        name = "_".join(rng.sample(_IDENTIFIERS, 2))
        # Whole-word renames only, so no learned piece glues an identifier into the middle of a keyword.
        snippet = re.sub(r"\bvalue\b", name, rng.choice(_CODE))
        docs.append(re.sub(r"\bx\b", rng.choice(_IDENTIFIERS), snippet))
    rng.shuffle(docs)
    return docs
