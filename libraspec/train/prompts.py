"""Prompts for self-distilling the embedded drafter's training data.

The drafter learns to predict what the target (SmolLM2-135M-Instruct) answers, so
it needs many varied prompts. These are written for this project: templates with
random fillers (seeded), covering arithmetic and word problems, small coding tasks,
explanations, everyday chat, lists, definitions and translations. No benchmark data.

`all_prompts()` is deterministic. Its first `HELDOUT_SIZE` prompts are the held-out
set (shipped as `assets/heldout_prompts.jsonl`, never used for training); the rest
are `training_prompts()`. No paper symbols here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..files import atomic_write_text

SEED = 20240917
NUM_PROMPTS = 16384  # held-out + training; prefix-stable, so raising it keeps every index
HELDOUT_SIZE = 64
MONITOR_PROMPTS = 32  # the training monitor reads held-out prompts 1-32; evaluate's `heldout` suite the rest

NAMES = [
    "Ana",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jade",
    "Kofi",
    "Lena",
    "Mateo",
    "Nora",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Yara",
    "Zane",
]
ITEMS = [
    "apples",
    "marbles",
    "stickers",
    "books",
    "pencils",
    "cookies",
    "coins",
    "cards",
    "oranges",
    "stamps",
    "shells",
    "balloons",
    "eggs",
    "toy cars",
    "cupcakes",
    "beads",
]
PLACES = [
    "Lisbon",
    "Kyoto",
    "Vancouver",
    "Marrakesh",
    "Oslo",
    "Buenos Aires",
    "Prague",
    "Cape Town",
    "Hanoi",
    "Reykjavik",
    "Edinburgh",
    "Mexico City",
    "Istanbul",
    "Sydney",
    "a small mountain village",
    "the seaside",
    "a national park",
    "Rome",
    "Seoul",
]
CONCEPTS = [
    "photosynthesis",
    "gravity",
    "the water cycle",
    "electricity",
    "inflation",
    "vaccines",
    "black holes",
    "the internet",
    "recursion",
    "democracy",
    "evolution",
    "rainbows",
    "volcanoes",
    "compound interest",
    "machine learning",
    "tides",
    "the immune system",
    "plate tectonics",
    "sound waves",
    "magnets",
    "DNA",
    "climate change",
    "supply and demand",
    "the moon's phases",
    "batteries",
    "a binary search",
    "encryption",
    "friction",
    "clouds",
    "the seasons",
    "how airplanes fly",
    "why the sky is blue",
    "fractions",
    "prime numbers",
    "a sorting algorithm",
    "the stock market",
    "renewable energy",
    "sleep",
]
PAIRS = [
    ("a virus", "a bacterium"),
    ("weather", "climate"),
    ("a list", "a tuple in Python"),
    ("speed", "velocity"),
    ("a simile", "a metaphor"),
    ("RAM", "storage"),
    ("an alligator", "a crocodile"),
    ("baking soda", "baking powder"),
    ("a stock", "a bond"),
    ("HTTP", "HTTPS"),
    ("mass", "weight"),
    ("a lake", "a pond"),
    ("affect", "effect"),
    ("a compiler", "an interpreter"),
    ("a frog", "a toad"),
    ("TCP", "UDP"),
    ("a hurricane", "a tornado"),
    ("jam", "jelly"),
    ("a democracy", "a monarchy"),
    ("a for loop", "a while loop"),
    ("an asteroid", "a comet"),
    ("empathy", "sympathy"),
    ("git merge", "git rebase"),
    ("a mean", "a median"),
    ("a noun", "a verb"),
    ("a star", "a planet"),
]
CODE_TASKS = [
    "returns the largest number in a list",
    "checks whether a string is a palindrome",
    "counts the vowels in a string",
    "reverses a list without using reverse()",
    "returns the factorial of n",
    "returns the n-th Fibonacci number",
    "removes duplicates from a list while keeping order",
    "checks if a number is prime",
    "converts Celsius to Fahrenheit",
    "merges two sorted lists",
    "counts how often each word appears in a sentence",
    "flattens a nested list",
    "returns the sum of the digits of an integer",
    "capitalizes every word in a string",
    "finds the second smallest number in a list",
    "checks if two words are anagrams",
    "returns the average of a list of numbers",
    "computes the greatest common divisor",
    "splits a list into chunks of size k",
    "returns all even numbers from a list",
    "reads a text file and returns the number of lines",
    "converts a binary string to an integer",
    "rotates a list by k positions",
    "returns the longest word in a sentence",
    "checks if a year is a leap year",
    "sorts a list of tuples by their second element",
    "validates that a string looks like an email address",
    "computes the running total of a list",
    "transposes a matrix given as lists",
    "returns the intersection of two lists",
]
LANGUAGES = ["Python", "JavaScript", "Rust", "Go", "C", "Java", "Ruby", "TypeScript"]
SNIPPETS = [
    "total = 0\nfor x in range({a}):\n    total += x\nprint(total)",
    "def f(s):\n    return s[::-1]\nprint(f('{word}'))",
    "nums = [{a}, {b}, {c}]\nprint(sorted(nums, reverse=True))",
    "squares = {{n: n * n for n in range({c})}}\nprint(squares)",
    "def g(n):\n    if n <= 1:\n        return 1\n    return n * g(n - 1)\nprint(g({c}))",
    "words = '{word} {word2} {word}'.split()\nprint(len(set(words)))",
    "x = {a}\nwhile x > 1:\n    x = x // 2\n    print(x)",
    "data = [{a}, {b}, {c}]\nprint(sum(data) / len(data))",
    "print([i for i in range({a}) if i % {c} == 0])",
]
WORDS = [
    "serendipity",
    "resilient",
    "ephemeral",
    "meticulous",
    "benevolent",
    "ubiquitous",
    "candid",
    "frugal",
    "nostalgia",
    "pragmatic",
    "eloquent",
    "tenacious",
    "whimsical",
    "ambiguous",
    "diligent",
    "gregarious",
    "humble",
    "lucid",
    "mundane",
    "vivid",
    "garden",
    "window",
    "river",
    "planet",
    "lantern",
    "puzzle",
    "harvest",
    "compass",
]
PHRASES = [
    "Good morning",
    "Where is the train station?",
    "Thank you very much",
    "I would like a cup of coffee",
    "How much does this cost?",
    "See you tomorrow",
    "The weather is nice today",
    "I am learning a new language",
    "Happy birthday",
    "Can you help me, please?",
    "I love reading books",
    "What time is it?",
    "The cat is sleeping on the sofa",
    "Nice to meet you",
    "I am hungry",
]
TARGET_LANGS = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch", "Swedish"]
ACTIVITIES = [
    "studying for exams",
    "saving money",
    "sleeping better",
    "learning to cook",
    "staying focused while working from home",
    "running a first 5k",
    "keeping houseplants alive",
    "public speaking",
    "making friends in a new city",
    "writing a resume",
    "learning to draw",
    "reducing screen time",
    "packing for a trip",
    "starting a vegetable garden",
    "drinking more water",
    "learning to play guitar",
    "organizing a small closet",
    "job interviews",
]
RECIPIENTS = [
    "my manager",
    "a teacher",
    "my landlord",
    "a colleague",
    "a new client",
    "my neighbour",
    "the school principal",
    "a friend I haven't seen in years",
]
EMAIL_TOPICS = [
    "asking for a day off",
    "a delayed project",
    "a broken heater",
    "thanking them for their help",
    "rescheduling a meeting",
    "a noise complaint",
    "inviting them to a party",
    "a late payment",
    "requesting feedback on a report",
    "introducing myself",
]
CHARACTERS = [
    "a shy robot",
    "a curious fox",
    "an old lighthouse keeper",
    "a lost kitten",
    "a young wizard",
    "a talking tree",
    "a brave little mouse",
    "a retired astronaut",
    "a dragon who is afraid of fire",
    "a girl who can talk to birds",
    "a grumpy baker",
]
EVENTS = [
    "finds a mysterious map",
    "learns to make friends",
    "gets lost in a big city",
    "discovers a hidden door",
    "enters a baking contest",
    "travels to the moon",
    "has to save the village",
    "loses their voice",
    "meets their hero",
]
CATEGORIES = [
    "fruits that are high in vitamin C",
    "countries in South America",
    "programming languages",
    "famous painters",
    "ways to reuse plastic bottles",
    "board games for families",
    "indoor hobbies",
    "healthy breakfast ideas",
    "animals that live in the ocean",
    "musical instruments",
    "planets in the solar system",
    "things to do on a rainy day",
    "common kitchen herbs",
    "types of clouds",
    "words that rhyme with 'light'",
    "benefits of regular exercise",
]
DISHES = [
    "pancakes",
    "a simple tomato soup",
    "fried rice",
    "guacamole",
    "banana bread",
    "a vegetable omelette",
    "lemonade",
    "spaghetti with garlic and oil",
    "hummus",
]
THINGS = [
    "the ocean",
    "autumn leaves",
    "a cup of tea",
    "the city at night",
    "friendship",
    "a rainy Monday",
    "the first snow",
    "an old bicycle",
    "the stars",
    "a lazy cat",
]
STYLES = [
    "",
    "",
    "",
    " Keep it short.",
    " Answer in one paragraph.",
    " Use simple words.",
    " Please be concise.",
    " Explain step by step.",
    " Use bullet points.",
]


def _word_problem(r: random.Random) -> str:
    name, other = r.sample(NAMES, 2)
    item = r.choice(ITEMS)
    a, b, c = r.randint(5, 60), r.randint(2, 30), r.randint(1, 20)
    price, qty = r.randint(2, 15), r.randint(2, 12)
    return r.choice(
        [
            f"{name} has {a} {item}. {name} buys {b} more and gives {c} to {other}. "
            f"How many {item} does {name} have now?",
            f"A box holds {qty} {item}. {name} has {a} boxes. How many {item} is that in total?",
            f"{name} buys {qty} {item} at {price} dollars each and pays with a {price * qty + c} "
            f"dollar note. How much change does {name} get?",
            f"{name} and {other} share {a * 2} {item} equally. How many does each get?",
            f"A train travels at {a} km per hour for {qty} hours. How far does it go?",
            f"{name} reads {b} pages a day. How many days to finish a {b * qty + c} page book?",
        ]
    )


def _arithmetic(r: random.Random) -> str:
    a, b = r.randint(2, 999), r.randint(2, 99)
    return r.choice(
        [
            f"What is {a} + {b}?",
            f"What is {a} - {b}?",
            f"Compute {a} times {b}.",
            f"What is {a * b} divided by {b}?",
            f"What is {b}% of {a * 10}?",
            f"Is {a} an even or odd number?",
            f"What is the square of {b}?",
            f"Round {a}.{b} to the nearest whole number.",
            f"Solve for x: {b}x + {a} = {a + b * 3}.",
            f"Convert {a} minutes into hours and minutes.",
            f"What is the perimeter of a rectangle {a} cm long and {b} cm wide?",
        ]
    )


def _coding(r: random.Random) -> str:
    snippet = r.choice(SNIPPETS).format(
        a=r.randint(3, 40), b=r.randint(3, 40), c=r.randint(2, 7), word=r.choice(WORDS), word2=r.choice(WORDS)
    )
    return r.choice(
        [
            f"Write a Python function that {r.choice(CODE_TASKS)}.",
            f"Write a {r.choice(LANGUAGES)} function that {r.choice(CODE_TASKS)}.",
            f"Explain what this code does:\n```python\n{snippet}\n```",
            f"What does this Python code print?\n```python\n{snippet}\n```",
            f"How would you test a function that {r.choice(CODE_TASKS)}?",
            f"What is a common mistake when writing a function that {r.choice(CODE_TASKS)}?",
            f"Explain {r.choice(['a variable', 'a loop', 'a function', 'a class', 'an API', 'a dictionary', 'an exception', 'a unit test', 'version control', 'a database index'])} to a beginner programmer.",
        ]
    )


def _explain(r: random.Random) -> str:
    x, y = r.choice(PAIRS)
    concept = r.choice(CONCEPTS)
    audience = r.choice(["a child", "a ten-year-old", "a beginner", "my grandmother", "a high school student"])
    return r.choice(
        [
            f"Explain {concept} to {audience}.",
            f"What is the difference between {x} and {y}?",
            f"Give a short explanation of {concept}.",
            f"Why is {concept} important?",
            f"What are three interesting facts about {concept}?",
            f"Describe {concept} using an everyday analogy.",
            f"Which is bigger or more common: {x} or {y}? Explain briefly.",
        ]
    )


def _chat(r: random.Random) -> str:
    return r.choice(
        [
            f"Write a short email to {r.choice(RECIPIENTS)} about {r.choice(EMAIL_TOPICS)}.",
            f"Give me {r.randint(3, 7)} tips for {r.choice(ACTIVITIES)}.",
            f"Plan a {r.randint(1, 5)}-day trip to {r.choice(PLACES)}.",
            f"Write a short story about {r.choice(CHARACTERS)} who {r.choice(EVENTS)}.",
            f"Write a {r.choice(['short poem', 'haiku', 'limerick', 'four-line poem'])} about {r.choice(THINGS)}.",
            f"How do I make {r.choice(DISHES)}?",
            f"I feel nervous about {r.choice(ACTIVITIES)}. Any advice?",
            f"Suggest a name for {r.choice(['a bakery', 'a pet hamster', 'a podcast about science', 'a hiking club', 'a coffee shop', 'a board game'])}.",
            f"What should I pack for a weekend in {r.choice(PLACES)}?",
            f"Write a friendly text message inviting {r.choice(NAMES)} to {r.choice(['dinner', 'a movie', 'a walk', 'a game night', 'a picnic'])}.",
        ]
    )


def _lists_and_words(r: random.Random) -> str:
    word = r.choice(WORDS)
    return r.choice(
        [
            f"List {r.randint(3, 8)} {r.choice(CATEGORIES)}.",
            f"Define the word '{word}'.",
            f"Use the word '{word}' in a sentence.",
            f"Give a synonym and an antonym for '{word}'.",
            f"Translate '{r.choice(PHRASES)}' into {r.choice(TARGET_LANGS)}.",
            f"How do you say '{r.choice(PHRASES)}' in {r.choice(TARGET_LANGS)}?",
            f"Rewrite this sentence to sound more formal: '{r.choice(PHRASES)}'.",
            f"Name {r.randint(2, 5)} {r.choice(CATEGORIES)} and say one thing about each.",
        ]
    )


def _reasoning_and_writing(r: random.Random) -> str:
    name = r.choice(NAMES)
    place, thing = r.choice(PLACES), r.choice(THINGS)
    note = (
        f"{name} moved to {place} last spring. At first the weather felt strange and the "
        f"streets were confusing, but after a few months {name} found a favourite cafe, "
        f"joined a {r.choice(['choir', 'running group', 'chess club', 'book club'])} "
        f"and started to feel at home."
    )
    return r.choice(
        [
            f"Summarize this in one sentence: {note}",
            f"What is the main feeling in this text? {note}",
            f"Brainstorm {r.randint(3, 6)} ideas for {r.choice(['a science fair project', 'a birthday gift for a friend', 'a school fundraiser', 'a short film', 'a weekend project', 'a team-building activity'])}.",
            f"What are the pros and cons of {r.choice(['working from home', 'electric cars', 'living in a big city', 'learning online', 'owning a dog', 'public transport', 'social media'])}?",
            f"Describe {thing} in three sentences.",
            f"Write a product description for {r.choice(['a reusable water bottle', 'a desk lamp', 'wireless headphones', 'a hiking backpack', 'a notebook', 'a houseplant'])}.",
            f"If I have {r.randint(2, 9)} hours free in {place}, what should I do?",
            f"Convert {r.randint(1, 99)} {r.choice(['kilometres to miles', 'kilograms to pounds', 'litres to cups', 'meters to feet'])}.",
            f"Give an example of {r.choice(CONCEPTS)} in daily life.",
            f"Write a riddle whose answer is '{r.choice(WORDS)}'.",
        ]
    )


GENERATORS = (_word_problem, _arithmetic, _coding, _explain, _chat, _lists_and_words, _reasoning_and_writing)


def all_prompts(num_prompts: int = NUM_PROMPTS, seed: int = SEED) -> list[str]:
    """`num_prompts` distinct prompts, deterministic in `seed`, categories interleaved."""
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be positive, got {num_prompts}")
    r = random.Random(seed)
    seen: set[str] = set()
    prompts: list[str] = []
    attempts = 0
    while len(prompts) < num_prompts:
        attempts += 1
        if attempts > 50 * num_prompts:
            raise ValueError(f"cannot make {num_prompts} distinct prompts from the templates")
        text = r.choice(GENERATORS)(r) + r.choice(STYLES)
        if text not in seen:
            seen.add(text)
            prompts.append(text)
    return prompts


def heldout_prompts() -> list[str]:
    """The 64 held-out prompts: never seen in training."""
    return all_prompts()[:HELDOUT_SIZE]


def training_prompts() -> list[str]:
    """Every prompt except the held-out ones; `prompt_index` in data refers to this list."""
    return all_prompts()[HELDOUT_SIZE:]


def write_heldout(path: str | Path) -> None:
    """Write the held-out prompts as JSONL, one {"prompt": ...} per line, in one atomic rename.

    This is how `assets/heldout_prompts.jsonl` is made (tests/test_prompts.py checks it).
    """
    atomic_write_text(path, "".join(json.dumps({"prompt": prompt}) + "\n" for prompt in heldout_prompts()))
