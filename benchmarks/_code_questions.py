"""Requests that carry a fenced file and ask for something other than the file back.

The code edits (``_code_edits``) are answered with the file they carry; these are answered
with new code that opens the same kind of fence (tests, a script using the module, a port
to another language, one changed method), with prose, or with the file rewritten whole
(type hints: a reproduction with many small edits). Where an answer opens with the fence
line the prompt's block opens with (```` ```python ```` and a newline) and then writes
code of its own, a rule that believes a reproduction from the fence line alone would draft
the prompt's file there and fail at the first token of the body: this is the workload that
shows what such a rule costs (``bench_reproduction``).
"""

from __future__ import annotations

from _code_edits import BASE

PRICES = '''def apply_discount(prices, percent):
    """Prices after a discount of `percent` percent, rounded to cents."""
    factor = 1 - percent / 100
    return [round(p * factor, 2) for p in prices]


def cheapest(prices, n):
    """The n lowest prices, lowest first."""
    return sorted(prices)[:n]
'''

QUESTIONS = [
    (BASE, "Write pytest unit tests for add_item and remove_item."),
    (BASE, "Write a short script that uses this class to add three items and print the total."),
    (BASE, "Rewrite the class in JavaScript."),
    (BASE, "Add type hints to every method. Output the complete file."),
    (BASE, "remove_item raises KeyError for an unknown name. Output only the fixed method."),
    (BASE, "Explain what low_stock returns, in two sentences."),
    (
        BASE,
        "Write a function that loads the items from a CSV file with columns name, quantity, price.",
    ),
    (PRICES, "Write pytest tests for both functions."),
    (PRICES, "Add a function most_expensive(prices, n) in the same style."),
    (
        PRICES,
        "Make apply_discount reject a percent outside 0-100 with ValueError. Output the file.",
    ),
]


def requests() -> list:
    """[(id, chat messages)]: one per question, each a conversation of its own."""
    return [
        (
            f"question {i + 1}",
            [{"role": "user", "content": f"Here is my code:\n```python\n{text}```\n{question}"}],
        )
        for i, (text, question) in enumerate(QUESTIONS)
    ]
