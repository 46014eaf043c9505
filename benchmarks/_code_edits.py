"""A code-editing workload: successive edits of one file, each request carrying the file.

Five requests on one module (about 450 tokens): each gives the file as it stands after
the edits before it and asks for one more edit, answered with the whole file. Fixed file
versions (the edits applied here, by string replacement), so every mode and tool gets the
very same prompts whatever the model answered before. This is where a drafter that copies
pays most: nearly every answer token is in the prompt, and every answer is nearly the one
before it (what a memory of earlier requests holds).
"""

from __future__ import annotations

BASE = '''"""Stock levels of a small shop."""
import json


class Inventory:
    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        with open(self.path) as f:
            self.items = json.load(f)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)

    def add_item(self, name, quantity, price):
        if name in self.items:
            self.items[name]["quantity"] += quantity
        else:
            self.items[name] = {"quantity": quantity, "price": price}

    def remove_item(self, name, quantity):
        item = self.items[name]
        if item["quantity"] < quantity:
            raise ValueError(f"only {item['quantity']} of {name} left")
        item["quantity"] -= quantity

    def total_value(self):
        total = 0
        for name, item in self.items.items():
            total += item["quantity"] * item["price"]
        return total

    def low_stock(self, threshold):
        return [name for name, item in self.items.items() if item["quantity"] < threshold]
'''

# (instruction, how the file changes: replacements applied in order)
EDITS = [
    (
        "Rename the method total_value to stock_value.",
        [("def total_value(self):", "def stock_value(self):")],
    ),
    (
        "Give low_stock a default threshold of 5.",
        [("def low_stock(self, threshold):", "def low_stock(self, threshold=5):")],
    ),
    (
        "Rename the variable total to value in stock_value.",
        [
            ("        total = 0\n", "        value = 0\n"),
            ("            total += item", "            value += item"),
            ("        return total\n", "        return value\n"),
        ],
    ),
    (
        "Make remove_item delete an item whose quantity reaches zero.",
        [
            (
                '        item["quantity"] -= quantity\n',
                '        item["quantity"] -= quantity\n        if item["quantity"] == 0:\n'
                "            del self.items[name]\n",
            )
        ],
    ),
    ("Add a method names that returns the item names in alphabetical order, after low_stock.", []),
]


def versions() -> list:
    """The file before each edit request."""
    out, text = [], BASE
    for _, changes in EDITS:
        out.append(text)
        for old, new in changes:
            assert old in text, old
            text = text.replace(old, new)
    return out


def requests() -> list:
    """[(id, chat messages)]: one per edit, in order."""
    out = []
    for i, ((instruction, _), text) in enumerate(zip(EDITS, versions())):
        content = (
            f"Here is inventory.py:\n```python\n{text}```\n{instruction} "
            "Output the complete updated file only."
        )
        out.append((f"edit {i + 1}", [{"role": "user", "content": content}]))
    return out
