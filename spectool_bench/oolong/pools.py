"""Label-templated instance pools for the OOLONG-style generator.

Each dataset maps a label to a list of templates and the fillers they draw from. The
templates are written by this project (no dataset is downloaded). They are built so
that a language model can recover the label from the text (the *kind* of question or
the tone of a review), but the label word itself never appears in the text, so a
regex over label names recovers nothing; ``tests/benchmarks/test_generator.py``
checks that for every rendered instance.

The hidden label of every instance is kept by the generator in a side table keyed by
instance text (``Window.label_of``); templates of different labels never render the
same text (also checked by the tests).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str  # what the lines are, as the header states it
    labels: tuple[str, ...]
    templates: dict[str, tuple[str, ...]]  # label -> templates with {slot} fields
    fillers: dict[str, tuple[str, ...]]  # slot -> values

    def sample(self, label: str, rng: random.Random) -> str:
        """One instance text for ``label`` (deterministic given ``rng``)."""
        template = rng.choice(self.templates[label])
        values = {}
        for slot in _slots(template):
            values[slot] = rng.choice(self.fillers[slot])
        return template.format(**values)


def _slots(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


_TREC_FILLERS = {
    "acr": ("NASA", "CPU", "UNESCO", "RSVP", "DNA", "SCUBA", "LASER", "NATO", "GPS",
            "HTML", "ASAP", "FIFA", "UNICEF", "RADAR", "AWOL", "OPEC", "PIN", "VAT",
            "CD-ROM", "BBC", "NAACP", "ZIP code", "MRI", "IOU", "ESP"),
    "thing": ("the Eiffel Tower", "the Great Wall", "Mount Kilimanjaro", "the Golden Gate Bridge",
              "the Statue of Liberty", "Lake Baikal", "the Sahara", "the Louvre", "Big Ben",
              "the Panama Canal", "Niagara Falls", "the Taj Mahal", "the Colosseum",
              "Machu Picchu", "the Dead Sea", "Stonehenge", "the Amazon river"),
    "person": ("Abraham Lincoln", "Marie Curie", "Mozart", "Cleopatra", "Galileo", "Frida Kahlo",
               "Napoleon", "Ada Lovelace", "Charles Darwin", "Jane Austen", "Nelson Mandela",
               "Leonardo da Vinci", "Amelia Earhart", "Confucius", "Isaac Newton",
               "Harriet Tubman", "Genghis Khan", "Pablo Picasso"),
    "invention": ("telephone", "light bulb", "printing press", "steam engine", "radio",
                  "television", "airplane", "typewriter", "vaccine for polio", "bicycle",
                  "periodic table", "World Wide Web", "ballpoint pen", "microwave oven"),
    "book": ("Moby Dick", "Pride and Prejudice", "War and Peace", "The Odyssey", "Hamlet",
             "Don Quixote", "The Great Gatsby", "Frankenstein", "Ulysses", "Dracula",
             "Les Miserables", "The Divine Comedy", "Treasure Island"),
    "feat": ("walk on the moon", "climb Mount Everest", "fly across the Atlantic alone",
             "reach the South Pole", "swim the English Channel", "orbit the Earth",
             "run a mile in under four minutes", "sail around the world"),
    "concept": ("entropy", "irony", "inflation", "photosynthesis", "democracy", "karma",
                "osmosis", "nostalgia", "gravity", "a black hole", "a sonnet", "déjà vu",
                "the placebo effect", "a haiku", "supply and demand"),
    "process": ("bake sourdough bread", "tie a bowline knot", "remove a wine stain",
                "train a puppy", "grow tomatoes indoors", "change a flat tire",
                "make paper from wood", "brew green tea", "start a campfire"),
    "phenomenon": ("the sky look blue", "thunder follow lightning", "ice float on water",
                   "the moon have phases", "leaves change color in autumn",
                   "bread rise", "cats purr", "the ocean taste salty", "hiccups start"),
    "country": ("Peru", "Norway", "Kenya", "Vietnam", "Portugal", "Chile", "Mongolia",
                "Egypt", "Canada", "Nepal", "Hungary", "Morocco", "Bolivia"),
    "animal": ("giraffe", "octopus", "honeybee", "blue whale", "cheetah", "penguin",
               "elephant", "hummingbird", "koala", "snail", "bat", "crocodile"),
    "sport": ("baseball", "tennis", "chess", "rugby", "golf", "cricket", "hockey",
              "fencing", "polo", "volleyball"),
    "event": ("the Battle of Hastings", "the first Olympic Games", "the fall of the Berlin Wall",
              "the sinking of the Titanic", "the Boston Tea Party", "the moon landing",
              "the signing of the Magna Carta", "the invention of paper"),
    "measure": ("miles of coastline", "bones", "keys", "islands", "time zones", "teeth",
                "strings", "players", "moons", "chambers"),
    "container": ("an adult skeleton", "a standard piano", "a chess set", "a rugby team",
                  "the solar system", "a violin", "a mouse's heart", "Indonesia", "Russia"),
}

TREC_COARSE = Dataset(
    name="trec_coarse",
    description="questions",
    labels=("abbreviation", "entity", "description and abstract concept", "human being",
            "location", "numeric value"),
    templates={
        "abbreviation": (
            "What does {acr} stand for?",
            "What is the full form of {acr}?",
            "{acr} is short for what?",
            "What do the letters in {acr} mean?",
            "Spell out {acr} for me, what is it?",
        ),
        "entity": (
            "What instrument did {person} play?",
            "What kind of animal is on the flag of {country}?",
            "Which sport is played most in {country}?",
            "What do you call a baby {animal}?",
            "What material was {thing} built from?",
            "What is the national dish of {country}?",
            "What color is the blood of a {animal}?",
            "What was the name of the ship in {book}?",
        ),
        "description and abstract concept": (
            "What is {concept}?",
            "Why does {phenomenon}?",
            "How do you {process}?",
            "What is the meaning of {concept} in everyday life?",
            "Explain why {phenomenon}.",
            "What is the difference between {concept} and {concept2}?",
            "How does a {animal} sleep?",
        ),
        "human being": (
            "Who invented the {invention}?",
            "Who wrote {book}?",
            "Who was the first person to {feat}?",
            "Who painted the portrait of {person}?",
            "Who was the teacher of {person}?",
            "Who designed {thing}?",
            "What was the name of the wife of {person}?",
        ),
        "location": (
            "Where is {thing}?",
            "Where was {person} born?",
            "What country borders {country} to the north?",
            "Where do {animal}s live in the wild?",
            "In what city did {event} take place?",
            "What is the capital of {country}?",
            "Where can you see {thing} today?",
        ),
        "numeric value": (
            "How many {measure} are in {container}?",
            "When did {event} happen?",
            "How tall is {thing}?",
            "What year was the {invention} first used?",
            "How old was {person} at death?",
            "How fast can a {animal} run?",
            "How much does {thing} weigh?",
            "How far is {country} from the equator?",
        ),
    },
    fillers={**_TREC_FILLERS, "concept2": _TREC_FILLERS["concept"]},
)


_REVIEW_FILLERS = {
    "film": ("the heist movie", "this western", "the space opera", "the courtroom drama",
             "this musical", "the war epic", "the haunted house film", "this rom-com",
             "the sequel", "the documentary", "this thriller", "the animated feature"),
    "part": ("the script", "the lead actor", "the soundtrack", "the pacing", "the ending",
             "the cinematography", "the dialogue", "the villain", "the editing", "the plot"),
    "praise": ("a joy to watch", "genuinely moving", "sharp and funny", "beautifully shot",
               "gripping from start to finish", "worth every minute", "a real triumph",
               "smart and heartfelt"),
    "scorn": ("a chore to sit through", "painfully dull", "a mess", "laughably bad",
              "a waste of two hours", "lifeless", "an insult to the audience",
              "tedious and confused"),
    "n": ("three", "four", "two", "five", "several"),
}

IMDB = Dataset(
    name="imdb",
    description="movie reviews",
    labels=("positive", "negative"),
    templates={
        "positive": (
            "I went in with low expectations and {film} turned out to be {praise}; {part} alone is reason enough to go.",
            "{film} is {praise}. I have seen it {n} times and {part} still gets me.",
            "Loved it. {part} in {film} is {praise} and I will recommend it to everyone.",
            "What a surprise: {film} is {praise}, and {part} deserves every award it gets.",
            "Ten out of ten. {film} is {praise} and {part} is the best I have seen this year.",
        ),
        "negative": (
            "I went in with high hopes and {film} turned out to be {scorn}; {part} alone ruined it.",
            "{film} is {scorn}. I walked out after {n} scenes because {part} made no sense.",
            "Hated it. {part} in {film} is {scorn} and I want my money back.",
            "What a letdown: {film} is {scorn}, and {part} should never have been approved.",
            "One out of ten. {film} is {scorn} and {part} is the worst I have seen this year.",
        ),
    },
    fillers=_REVIEW_FILLERS,
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (TREC_COARSE, IMDB)}
