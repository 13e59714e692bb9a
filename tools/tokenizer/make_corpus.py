#!/usr/bin/env python3
"""Writes the tokenizer test corpus: tools/tokenizer/corpus.jsonl and invalid_utf8.jsonl.

corpus.jsonl holds one JSON string per line (at least 2000), chosen to stress what tokenizers
get wrong: many scripts, code, emoji and ZWJ sequences, combining marks (composed and
decomposed, for NFC), whitespace runs, tabs and CRLF, numbers in several digit systems, URLs,
special-token spellings inside text, empty strings, long words and repeated characters.
invalid_utf8.jsonl holds hex-encoded byte strings that are not valid UTF-8.

Deterministic: a fixed seed and only stdlib `random` methods whose output is stable across
Python versions (random, randrange, choice). Run: python3 tools/tokenizer/make_corpus.py
"""

import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(20241122)

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "She said, \"I'll be there at 5 o'clock,\" but she didn't come.",
    "We're going to need a bigger boat; they've already left.",
    "Tokenizers split text into pieces that a language model can embed.",
    "The committee's decision, announced on Tuesday, surprised nobody.",
    "Mr. O'Neil-Smith (aged 42) wasn't impressed -- not at all!",
    "HTTP/1.1 200 OK was returned in 0.35 seconds on average.",
    "Prices rose by 3.5% in Q3 2023, compared with 2.1% a year earlier.",
    "Dear Sir or Madam,\nI am writing to complain about my order #12345.\nRegards,\nJohn",
    "   Leading spaces and trailing spaces   ",
    "ALL CAPS SENTENCE WITH SHOUTING AND IT'S LOUD, ISN'T IT?",
    "mixedCase camelCase snake_case kebab-case SCREAMING_SNAKE_CASE",
    "Don't, won't, can't, shouldn't, I'd, you'll, they're, we've, I'm, it's.",
    "DON'T WON'T I'LL YOU'RE THEY'VE I'M HE'D",
    "The year 2024 has 366 days; 1,000,000 is a million; 3.14159 is pi.",
    "Call +1 (555) 123-4567 or email info@example.com before 23:59 UTC.",
    "E = mc^2, a^2 + b^2 = c^2, and x_{i+1} = x_i - f(x_i)/f'(x_i).",
    "The ratio was 1:3, the temperature -40\u00b0C, and the angle 45\u00b0.",
    "Once upon a time, in a land far, far away, there lived a dragon.",
    "Rock 'n' roll, ma'am, o'clock, 'tis, y'all, and the '90s.",
    "Quotation marks: \u201cdouble\u201d, \u2018single\u2019, \u00abguillemets\u00bb, \u201elow\u201c.",
    "Ellipsis\u2026 em dash \u2014 en dash \u2013 bullet \u2022 middle dot \u00b7",
]

WORDS = (
    "the of and to in is was for on that with as by at from his her it an were which "
    "are this also be had first one their its new after but who not they have has been two "
    "she he more other time would all many people year can most some only over through when "
    "while where between during however although because government university system "
    "language model token sequence attention transformer inference memory kernel process "
    "thread socket weight tensor matrix vector cache server worker profile sample seed "
    "throughput latency bandwidth microsecond benchmark deterministic reproducible"
).split()

MULTILINGUAL = [
    "Le c\u0153ur a ses raisons que la raison ne conna\u00eet point.",
    "\u00c0 l'\u00e9cole, l'\u00e9l\u00e8ve a r\u00e9pondu : \u00ab Oui, c'est \u00e7a ! \u00bb",
    "Der Stra\u00dfenverkehr in M\u00fcnchen ist \u00fcbersichtlich; \u00c4rger gibt's selten.",
    "Donaudampfschifffahrtsgesellschaftskapit\u00e4nsm\u00fctze",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Aqu\u00ed! El ni\u00f1o come pi\u00f1a.",
    "A ra\u00e7\u00e3o do c\u00e3o est\u00e1 na cozinha, n\u00e3o \u00e9?",
    "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144.",
    "P\u0159\u00edli\u0161 \u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u00fap\u011bl \u010f\u00e1belsk\u00e9 \u00f3dy.",
    "\u00c1rv\u00edzt\u0171r\u0151 t\u00fck\u00f6rf\u00far\u00f3g\u00e9p.",
    "\u0130stanbul'da \u0131\u015f\u0131k ve \u00e7i\u00e7ek; I\u0131 \u0130i ayr\u0131 harflerdir.",
    "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a, \u0434\u0430 \u0432\u044b\u043f\u0435\u0439 \u0447\u0430\u044e.",
    "\u0429\u043e \u0441\u0442\u0430\u043b\u043e\u0441\u044f? \u0407\u0436\u0430\u043a \u0456 \u0491\u0430\u043d\u043e\u043a \u2014 \u0443\u043a\u0440\u0430\u0457\u043d\u0441\u044c\u043a\u0430 \u043c\u043e\u0432\u0430.",
    "\u039e\u03b5\u03c3\u03ba\u03b5\u03c0\u03ac\u03b6\u03c9 \u03c4\u1f74\u03bd \u03c8\u03c5\u03c7\u03bf\u03c6\u03b8\u03cc\u03c1\u03b1 \u03b2\u03b4\u03b5\u03bb\u03c5\u03b3\u03bc\u03af\u03b1.",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629 \u062c\u062f\u064b\u0627\u060c \u0623\u0644\u064a\u0633 \u0643\u0630\u0644\u0643\u061f",
    "\u0628\u0650\u0633\u0652\u0645\u0650 \u0671\u0644\u0644\u0651\u064e\u0670\u0647\u0650 \u0671\u0644\u0631\u0651\u064e\u062d\u0652\u0645\u064e\u0670\u0646\u0650",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u05de\u05d4 \u05e9\u05dc\u05d5\u05de\u05da \u05d4\u05d9\u05d5\u05dd?",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u092c\u0939\u0941\u0924 \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964 \u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f \u0936\u094d\u0930\u0940",
    "\u0986\u09ae\u09be\u09b0 \u09b8\u09cb\u09a8\u09be\u09b0 \u09ac\u09be\u0982\u09b2\u09be, \u0986\u09ae\u09bf \u09a4\u09cb\u09ae\u09be\u09af\u09bc \u09ad\u09be\u09b2\u09cb\u09ac\u09be\u09b8\u09bf\u0964",
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0b92\u0bb0\u0bc1 \u0ba4\u0bca\u0ba9\u0bcd\u0bae\u0bc8\u0baf\u0bbe\u0ba9 \u0bae\u0bca\u0bb4\u0bbf.",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07\u0e23\u0e30\u0e2b\u0e27\u0e48\u0e32\u0e07\u0e04\u0e33",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u4eba\u5de5\u667a\u80fd\u7684\u53d1\u5c55\u6b63\u5728\u6539\u53d8\u4e16\u754c\uff1b\u5927\u8bed\u8a00\u6a21\u578b\u662f\u5176\u4e2d\u7684\u4e00\u90e8\u5206\u3002",
    "\u81fa\u7063\u7684\u7e41\u9ad4\u5b57\u8207\u5927\u9678\u7684\u7c21\u9ad4\u5b57\u4e0d\u540c\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3042\u308a\u307e\u3059\u3002",
    "\uff8a\uff9d\uff76\uff78\uff76\uff80\uff76\uff85 \u534a\u89d2\u30ab\u30ca\u3068\u5168\u89d2\uff21\uff22\uff23",
    "\ud55c\uad6d\uc5b4\ub294 \uc138\uc885\ub300\uc655\uc774 \ub9cc\ub4e4\uc5c8\uc2b5\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 r\u1ea5t nhi\u1ec1u d\u1ea5u: \u0111\u01b0\u1eddng ph\u1ed1 H\u00e0 N\u1ed9i.",
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u10d0\u10dc\u10d1\u10d0\u10dc\u10d8 \u10eb\u10d0\u10da\u10d8\u10d0\u10dc \u10da\u10d0\u10db\u10d0\u10d6\u10d8\u10d0.",
    "\u0540\u0561\u0575\u0565\u0580\u0565\u0576 \u056c\u0565\u0566\u0578\u0582\u0576 \u0570\u0576\u0561\u0563\u0578\u0582\u0575\u0576 \u0567\u0589",
    "\u12a0\u121b\u122d\u129b \u12e8\u12a2\u1275\u12ee\u1335\u12eb \u124b\u1295\u124b \u1290\u12cd\u1362",
    "\u1798\u17b6\u1793\u1797\u17b6\u179f\u17b6\u1781\u17d2\u1798\u17c2\u179a \u1794\u17b6\u1791",
    "\u0d2e\u0d32\u0d2f\u0d3e\u0d33\u0d02 \u0d12\u0d30\u0d41 \u0d26\u0d4d\u0d30\u0d3e\u0d35\u0d3f\u0d21 \u0d2d\u0d3e\u0d37\u0d2f\u0d3e\u0d23\u0d4d.",
    "\u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42\u0f0b\u0f42\u0f72\u0f0b\u0f66\u0f90\u0f51\u0f0b\u0f61\u0f72\u0f42",
    "\u1019\u103c\u1014\u103a\u1019\u102c\u1018\u102c\u101e\u102c \u1005\u1000\u102c\u1038",
    "Kiswahili ni lugha ya Afrika Mashariki; Habari yako?",
    "\u00cdslenska: \u00fe\u00f3r og \u00f0\u00e6r, \u00e1 \u00feingvelli.",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html>\n  <body>\n    <div class=\"main\" id='x'>Hello &amp; welcome</div>\n  </body>\n</html>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": {}}}",
    "if [ -f \"$HOME/.bashrc\" ]; then\n  source \"$HOME/.bashrc\" && echo ok || exit 1\nfi",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares of evens",
    "    return {'status': 'ok', \"code\": 200}\r\n",
    "public static void main(String[] args) { System.out.println(\"Hi\"); }",
    "    \t  mixed\t indentation\n\t\tline two\n",
    "a += b; a -= c; a *= d; a /= e; a %= f; a <<= 2; a >>= 3; a &&= b; a ||= c; a ??= d;",
    "!== === != == <= >= => -> :: ... .. ?. ?? ** // /* */ <!-- --> #! @@ ## $$ %% ^^",
    "import numpy as np\nimport torch.nn.functional as F\n\nx = F.softmax(torch.randn(4, 8), dim=-1)\n",
    "matrix[i][j] = matrix[i - 1][j - 1] + (s[i] == t[j] ? 0 : 1);",
    "printf(\"%d %s %.3f\\n\", count, name, ratio);",
    "// TODO(alice): fix this hack before release!!!\n/* multi\n   line\n   comment */",
    "    def __init__(self, *args, **kwargs) -> None:\n        super().__init__(*args, **kwargs)\n",
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,4 @@\n-old line\n+new line\n+another\n",
    "Makefile:\nall:\n\t$(CC) -O2 -o $@ $^ $(LDFLAGS)\n",
    "regex = r'^(?P<user>[\\w.+-]+)@(?P<host>[\\w-]+\\.[\\w.-]+)$'",
    "0x7fffffff 0b1010 0o755 1_000_000 3.0e-8 .5 5. 1e100 0xDEADBEEF",
]

SPECIALS = [
    "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>",
    "<|reserved_special_token_250|>", "<|finetune_right_pad_id|>", "<|python_tag|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<|vision_start|>", "<|fim_prefix|>", "<|object_ref_start|>",
]

EMOJI = [
    "\U0001F600", "\U0001F44D", "\U0001F44D\U0001F3FD", "\u2764\ufe0f", "\U0001F1FA\U0001F1F8",
    "\U0001F1EF\U0001F1F5", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F469\U0001F3FE\u200d\U0001F4BB", "\U0001F3F3\ufe0f\u200d\U0001F308", "1\ufe0f\u20e3",
    "#\ufe0f\u20e3", "\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1", "\U0001F415\u200d\U0001F9BA",
    "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", "\u263a", "\u2603",
    "\U0001F680", "\U0001F525", "\U0001F602", "\U0001F914", "\U0001F4AF", "\u2705", "\u274c",
    "\U0001F9E0", "\U0001F40D", "\U0001F980", "\u2728", "\U0001F308",
]

# Each pairs a precomposed string with a decomposed spelling; NFC must fold the second into
# the first for Qwen, while Llama tokenizers see different bytes.
NFC_PAIRS = [
    ("\u00e9", "e\u0301"), ("\u00c5", "A\u030a"), ("\u00c5", "\u212b"), ("\u1e69", "s\u0323\u0307"),
    ("\u1e69", "s\u0307\u0323"), ("\u00f1", "n\u0303"), ("\u1ec7", "e\u0323\u0302"),
    ("\ud55c", "\u1112\u1161\u11ab"), ("\u304c", "\u304b\u3099"), ("\u01fa", "A\u030a\u0301"),
    ("\u00fc", "u\u0308"), ("\u0958", "\u0915\u093c"), ("\u2126", "\u03a9"), ("\u00c7", "C\u0327"),
]

WHITESPACE = [" ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u2003",
              "\u3000", "\u0085", "\u2028", "\u2029", "\x0b", "\x0c", "\u180e", "\u200b",
              "\u202f", "\u205f", "\u1680", "\u2009", "\ufeff", " \n ", "\t \t", "\r\n\r\n"]

DIGITS = ["0123456789", "\u0660\u0661\u0662\u0663", "\u0966\u0967\u0968\u0969", "\uff11\uff12\uff13",
          "\u00b2\u00b3\u00b9", "\u00bd\u00be\u2153", "\u2160\u2161\u216b", "\u2460\u2461\u2462",
          "\U0001D7CE\U0001D7CF", "\u0e51\u0e52\u0e53", "\u4e00\u4e8c\u4e09"]

URLS = [
    "https://www.example.com/path/to/page?query=1&lang=en#section-2",
    "http://localhost:8080/api/v1/items/42?expand=true",
    "ftp://files.example.org/pub/README.txt",
    "https://en.wikipedia.org/wiki/Tokenization_(lexical_analysis)",
    "git@github.com:huggingface/tokenizers.git",
    "file:///home/user/My%20Documents/report.pdf",
    "https://\u4f8b\u5b50.\u6d4b\u8bd5/\u8def\u5f84?\u540d=\u503c",
    "mailto:someone@example.co.uk?subject=Hello%20there",
    "/usr/local/lib/python3.11/site-packages/tokenizers/__init__.py",
    "C:\\Users\\Admin\\AppData\\Local\\Temp\\file~1.tmp",
    "@user_name #hashtag #\u00dcberSchrift $TICKER 100% 50/50",
]

# Blocks assigned long before Unicode 14, so the Unicode tables of PCRE2, utf8proc and the
# Rust crates all agree on them.
RANDOM_BLOCKS = [
    (0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x10A0, 0x10FF),
    (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2190, 0x21FF),
    (0x2200, 0x22FF), (0x2500, 0x257F), (0x3040, 0x30FF), (0x4E00, 0x9FA5),
    (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F),
    (0x300, 0x36F), (0x1D400, 0x1D7FF), (0x10000, 0x1007F), (0x20000, 0x2A6D6),
    (0xE000, 0xE0FF),
]


def random_unicode(n):
    out = []
    while len(out) < n:
        lo, hi = rng.choice(RANDOM_BLOCKS)
        cp = rng.randrange(lo, hi + 1)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


def sentence(nwords):
    words = [rng.choice(WORDS) for _ in range(nwords)]
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", ":", "", "..."])


def pick(seq):
    return rng.choice(seq)


def build():
    out = []
    add = out.append

    # Fixed, hand-written lines first.
    for s in PROSE + MULTILINGUAL + CODE + URLS:
        add(s)
    for s in ["", " ", "  ", "\n", "\t", "\r\n", "a", "A", "0", ".", "'", "'s", "\u00e9", "\U0001F600",
              "\u0000", "\x01\x02\x7f", "\ufffd", "\ufeffBOM first", "\u200d", "\u0301",
              "\u0301leading combining", "e\u0301\u0301\u0301", "it'\u017f", "IT'\u017f"]:
        add(s)
    for a, b in NFC_PAIRS:
        add(a)
        add(b)
        add("caf" + b + " and caf" + a)
        add(b * 3 + " " + b.upper())
    for sp in SPECIALS:
        add(sp)
        add("Hello " + sp + " world")
        add(sp + "text" + sp)
        add(" " + sp + " ")
        add("x" + sp + sp + "y")
        add(sp[:-1])
        add(sp[1:])
        add(sp.upper())
        add("\n" + sp + "\n\n" + sp)
    add("<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    add("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")
    add("<s>[INST] What is 2+2? [/INST] 4</s><s>[INST] And 3+3? [/INST]")
    add("<think>\nLet me think step by step.\n</think>\n\nThe answer is 42.")
    add("<<s>> <s<s>> <|im_start|im_start|> <|<|endoftext|>|>")
    add("<s><s><s></s></s></s>")
    add("<unk><unk> unknown <unk>")
    for e in EMOJI:
        add(e)
        add("I love it " + e + "!")
        add(e * 5)
        add(e + e.join(["a", "b", "c"]))
    for ws in WHITESPACE:
        add(ws)
        add("word" + ws + "word")
        add(ws + "leading")
        add("trailing" + ws)
        add("a" + ws * 3 + "b")
        add(ws * 7)
    for d in DIGITS:
        add(d)
        add("value " + d + " units")
        add(d * 4)
    # Repeated characters and long words, where BPE merge order matters most.
    for ch in ["a", "e", " ", "!", "=", "-", ".", "\n", "0", "ab", "\u00e9", "\u4e2d", "\u30fc",
               "\U0001F600", "\t", "_", "*", "#", "~", "\u2581", "\u0120", "<", ">", "'"]:
        for n in [2, 3, 7, 16, 33, 100, 257]:
            add(ch * n)
    add("supercalifragilisticexpialidocious" * 3)
    add("pneumonoultramicroscopicsilicovolcanoconiosis")
    add("Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch")
    add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3000)))
    add("".join(rng.choice("ACGT") for _ in range(2000)))
    add("".join(rng.choice("0123456789") for _ in range(1000)))
    add("".join(rng.choice("\u4e00\u4e01\u4e03\u4e07\u4e08\u4e09\u4e0a\u4e0b\u4e0d\u4e0e") for _ in range(800)))
    add("x" * 5000)
    add("ab" * 2500)
    add(" " * 3000)
    add("\n" * 1000 + "end")
    add("\u00e9" * 1500)
    # Numbers in many shapes.
    for _ in range(150):
        kind = rng.randrange(8)
        if kind == 0:
            s = str(rng.randrange(10 ** rng.randrange(1, 19)))
        elif kind == 1:
            s = "%d.%0*d" % (rng.randrange(100000), rng.randrange(1, 7), rng.randrange(100000))
        elif kind == 2:
            s = "{:,}".format(rng.randrange(10 ** 12))
        elif kind == 3:
            s = "%04d-%02d-%02dT%02d:%02d:%02dZ" % (rng.randrange(1900, 2100), rng.randrange(1, 13),
                                                  rng.randrange(1, 29), rng.randrange(24),
                                                  rng.randrange(60), rng.randrange(60))
        elif kind == 4:
            s = "0x%X" % rng.randrange(1 << 32)
        elif kind == 5:
            s = "%.*e" % (rng.randrange(1, 8), rng.random() * 10 ** rng.randrange(-20, 20))
        elif kind == 6:
            s = "$%d.%02d" % (rng.randrange(100000), rng.randrange(100))
        else:
            s = "v%d.%d.%d-rc%d" % (rng.randrange(20), rng.randrange(50), rng.randrange(200),
                                    rng.randrange(5))
        add(pick(["", "Total: ", "at ", "(", "#"]) + s + pick(["", ".", ")", " items", "%"]))
    # Prose built from word lists with varied punctuation, casing and spacing.
    for _ in range(400):
        parts = [sentence(rng.randrange(3, 25)) for _ in range(rng.randrange(1, 4))]
        s = pick([" ", "  ", "\n", "\n\n", "\r\n", "\t", " \n"]).join(parts)
        mode = rng.randrange(10)
        if mode == 0:
            s = s.upper()
        elif mode == 1:
            s = s.lower()
        elif mode == 2:
            s = "   " + s + "   "
        elif mode == 3:
            s = s.replace(" ", "  ")
        elif mode == 4:
            s = s + " " + pick(EMOJI)
        elif mode == 5:
            s = s + " " + pick(URLS)
        elif mode == 6:
            s = pick(SPECIALS) + s + pick(SPECIALS)
        add(s)
    # Mixed scripts, code fragments and specials glued together.
    for _ in range(350):
        pieces = []
        for _ in range(rng.randrange(2, 7)):
            k = rng.randrange(9)
            if k == 0:
                pieces.append(pick(MULTILINGUAL))
            elif k == 1:
                pieces.append(pick(PROSE))
            elif k == 2:
                pieces.append(pick(CODE))
            elif k == 3:
                pieces.append(pick(EMOJI))
            elif k == 4:
                pieces.append(pick(SPECIALS))
            elif k == 5:
                pieces.append(pick(WHITESPACE))
            elif k == 6:
                pieces.append(pick(DIGITS))
            elif k == 7:
                pieces.append(pick(NFC_PAIRS)[rng.randrange(2)])
            else:
                pieces.append(pick(URLS))
        add(pick(["", " ", "\n"]).join(pieces))
    # Random code points from long-established blocks, including lone combining marks.
    for _ in range(350):
        add(random_unicode(rng.randrange(1, 60)))
    # Stacked combining marks ("zalgo") on several bases.
    for _ in range(60):
        base = pick("aeoxAZ\u0430\u03b1\u05d0\u0915 ")
        marks = "".join(chr(rng.randrange(0x300, 0x370)) for _ in range(rng.randrange(1, 12)))
        add(base + marks + pick(["", " next", "b"]))
    # Contractions in every case, with straight and typographic apostrophes.
    for _ in range(80):
        word = pick(["it", "he", "they", "we", "you", "I", "John", "don", "can", "x"])
        suf = pick(["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "VE", "M", "LL", "D", "Ll"])
        ap = pick(["'", "\u2019", "'", "`"])
        add(word + ap + suf + pick(["", " ", " go", "!", "'s"]))
    # Paragraph-length lines (a few kilobytes each).
    for _ in range(12):
        paras = []
        for _ in range(rng.randrange(5, 20)):
            paras.append(" ".join(sentence(rng.randrange(5, 30)) for _ in range(rng.randrange(2, 8))))
        add("\n\n".join(paras))
    for _ in range(6):
        add("\n".join(pick(CODE) for _ in range(rng.randrange(10, 40))))
    return out


INVALID_UTF8 = [
    "ff", "fe", "c0af", "c1bf", "e08080", "eda080", "edbfbf", "f4908080", "f8888080af",
    "80", "bf", "8080", "c3", "e282", "f09f98", "f09f9880f09f", "61ff62", "68656c6c6fc328",
    "e9", "48c3a9ffe282ac", "f0", "c328", "a0a1", "e228a1", "e28228", "f0289f98",
    "f09f2898", "efbbbf41", "7fc280df", "3c733eff3c2f733e", "e0a080f4bfbfbf", "c2",
]


def main():
    corpus = build()
    assert len(corpus) >= 2000, len(corpus)
    for s in corpus:
        s.encode("utf-8")  # no lone surrogates
    path = os.path.join(HERE, "corpus.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "invalid_utf8.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for h in INVALID_UTF8:
            bytes.fromhex(h)
            f.write(json.dumps(h) + "\n")
    print("wrote %d corpus lines (%d bytes of text) to %s" %
          (len(corpus), sum(len(s.encode()) for s in corpus), path), file=sys.stderr)


if __name__ == "__main__":
    main()
