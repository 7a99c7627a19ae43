"""The instructions a draft head is trained on (tools/train_draft_head.py): a
seeded mix of what a chat model is asked, by families: number sequences,
code, structured text and prose. None is a prompt of `inferctl bench single`
(count 1 to 300, the bookshop dataclasses, the consensus essay): the benchmark
measures the head on prompts it has not seen.

    python3 tools/draft_head_prompts.py --count 320 --seed 1 > prompts.txt
"""
import argparse
import random

DOMAINS = ["a hospital", "an airline", "a public library", "a school timetable", "a warehouse", "a bike rental shop",
           "a music streaming service", "a restaurant kitchen", "a football league", "a hotel", "a dental clinic",
           "a car workshop", "a recipe website", "a weather station network", "a bank", "a museum", "a gym",
           "a cinema", "a farm", "a parcel delivery company", "a university course catalogue", "a city bus network"]
TOPICS = ["how bridges carry loads", "the water cycle", "why the sky is blue", "how vaccines train the immune system",
          "the history of the printing press", "how compilers optimise loops", "the causes of inflation",
          "how a refrigerator works", "the life cycle of stars", "why sleep matters", "how the internet routes packets",
          "the rise of container shipping", "photosynthesis", "how databases keep data safe after a crash",
          "the migration of birds", "how batteries store energy", "the Roman road network", "plate tectonics",
          "how search engines rank pages", "the economics of renewable energy", "how garbage collectors reclaim memory",
          "the invention of the telescope", "coral reefs", "how elections are counted", "caching in web browsers"]
FUNCS = ["reverses a linked list", "parses a CSV line with quoted fields", "computes the median of a list",
         "merges two sorted lists", "checks whether a string is a palindrome", "counts word frequencies in a text",
         "implements binary search", "flattens a nested list", "validates an email address with a regex",
         "converts Roman numerals to integers", "computes Fibonacci numbers iteratively", "finds prime numbers with a sieve",
         "rotates a matrix by 90 degrees", "groups anagrams", "implements an LRU cache", "computes the edit distance"]
LANGS = ["Python", "JavaScript", "C", "Go", "Rust", "Java"]


def numbers(r):
    a = r.randint(2, 120)
    b = a + r.randint(40, 260)
    step = r.choice([1, 1, 1, 2, 3, 5, 10])
    return r.choice([
        f"List the numbers from {a} to {b}, one per line.",
        f"Count from {a} to {b} in steps of {step}, one number per line.",
        f"Count backwards from {b} to {a}. One number per line, nothing else.",
        f"Write the multiples of {step + 2} up to {b}, separated by commas.",
        f"Print every number between {a} and {b} on its own line, with no other text.",
        f"Write a numbered list of {r.randint(15, 60)} items: item 1, item 2, and so on.",
        f"Write the {step + 1} times table from {step + 1} x 1 to {step + 1} x {r.randint(12, 40)}.",
    ])


def code(r):
    d = r.choice(DOMAINS)
    return r.choice([
        f"Write Python dataclasses for the data model of {d}, with type hints and docstrings.",
        f"Write a {r.choice(LANGS)} function that {r.choice(FUNCS)}, with comments.",
        f"Write SQL CREATE TABLE statements for {d}, with primary and foreign keys.",
        f"Write a JSON example of ten records for {d}.",
        f"Write Python unit tests with pytest for a function that {r.choice(FUNCS)}.",
        f"Write a TypeScript interface for each entity of {d}.",
        f"Write a YAML configuration file for a service that runs {d}.",
        f"Write a Python class hierarchy for {d}, with methods and type hints.",
    ])


def prose(r):
    t = r.choice(TOPICS)
    return r.choice([
        f"Write an essay about {t}.",
        f"Explain {t} to a curious teenager.",
        f"Write a detailed technical explanation of {t}.",
        f"Summarise what is known about {t} in five paragraphs.",
        f"Write a short story in which {t} matters to the plot.",
        f"Write a list of ten questions and answers about {t}.",
        f"Write a letter to a friend describing {t}.",
    ])


def prompts(count, seed):
    r = random.Random(seed)
    families = [numbers, code, prose]
    return [families[i % 3](r) for i in range(count)]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=320)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print("\n".join(prompts(a.count, a.seed)))
