"""Label-templated instance pools for the OOLONG-style generator.

Ten datasets, named and labelled as the ten OOLONG-synth source datasets
(``abertsch72/oolong`` ``src/data_gen/oolong-synth/datasets_loader.py``: label lists
and order); the texts are this project's own stand-ins for the real rows.

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
    # label-neutral framings ("{}" = the text); a label may override with its own
    wrappers: tuple[str, ...] = ("{}",)
    label_wrappers: dict[str, tuple[str, ...]] | None = None
    tails: tuple[str, ...] = ("",)  # label-neutral endings appended to the text

    def sample(self, label: str, rng: random.Random) -> str:
        """One instance text for ``label`` (deterministic given ``rng``)."""
        template = rng.choice(self.templates[label])
        values = {}
        for slot in _slots(template):
            values[slot] = rng.choice(self.fillers[slot])
        text = template.format(**values)
        wrappers = (self.label_wrappers or {}).get(label, self.wrappers)
        return rng.choice(wrappers).replace("{}", text) + rng.choice(self.tails)


def _slots(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


_TREC_FILLERS = {
    "acr": ("NASA", "CPU", "UNESCO", "RSVP", "DNA", "SCUBA", "LASER", "NATO", "GPS",
            "HTML", "ASAP", "FIFA", "UNICEF", "RADAR", "AWOL", "OPEC", "PIN", "VAT",
            "CD-ROM", "BBC", "NAACP", "ZIP code", "MRI", "IOU", "ESP", "FBI", "UFO", "AIDS",
            "WHO", "EU", "SOS", "PTA", "ATM", "LCD", "USB", "JPEG", "IQ", "BC", "AM", "PM",
            "RIP", "PS", "CEO", "GDP", "NFL", "NBA", "DVD", "CIA", "AKA"),
    "thing": ("the Eiffel Tower", "the Great Wall", "Mount Kilimanjaro", "the Golden Gate Bridge",
              "the Statue of Liberty", "Lake Baikal", "the Sahara", "the Louvre", "Big Ben",
              "the Panama Canal", "Niagara Falls", "the Taj Mahal", "the Colosseum",
              "Machu Picchu", "the Dead Sea", "Stonehenge", "the Amazon river",
              "the Leaning Tower of Pisa", "the Sydney Opera House", "Mount Fuji",
              "the Grand Canyon", "the Kremlin", "the Parthenon", "the Hoover Dam",
              "Victoria Falls", "the Mississippi", "Lake Titicaca", "the Acropolis"),
    "person": ("Abraham Lincoln", "Marie Curie", "Mozart", "Cleopatra", "Galileo", "Frida Kahlo",
               "Napoleon", "Ada Lovelace", "Charles Darwin", "Jane Austen", "Nelson Mandela",
               "Leonardo da Vinci", "Amelia Earhart", "Confucius", "Isaac Newton",
               "Harriet Tubman", "Genghis Khan", "Pablo Picasso", "Florence Nightingale",
               "Julius Caesar", "Beethoven", "Queen Victoria", "Mark Twain", "Joan of Arc",
               "Albert Einstein", "Catherine the Great", "Vincent van Gogh", "Sojourner Truth",
               "Winston Churchill", "Marco Polo", "Tchaikovsky", "Simon Bolivar"),
    "invention": ("telephone", "light bulb", "printing press", "steam engine", "radio",
                  "television", "airplane", "typewriter", "vaccine for polio", "bicycle",
                  "periodic table", "World Wide Web", "ballpoint pen", "microwave oven",
                  "telescope", "sewing machine", "zipper", "dishwasher", "parachute",
                  "safety pin", "hot air balloon", "phonograph", "submarine", "thermometer"),
    "book": ("Moby Dick", "Pride and Prejudice", "War and Peace", "The Odyssey", "Hamlet",
             "Don Quixote", "The Great Gatsby", "Frankenstein", "Ulysses", "Dracula",
             "Les Miserables", "The Divine Comedy", "Treasure Island", "Jane Eyre",
             "Oliver Twist", "Little Women", "The Iliad", "Robinson Crusoe", "Gulliver's Travels",
             "The Raven", "Macbeth", "Emma", "Walden", "Beowulf"),
    "feat": ("walk on the moon", "climb Mount Everest", "fly across the Atlantic alone",
             "reach the South Pole", "swim the English Channel", "orbit the Earth",
             "run a mile in under four minutes", "sail around the globe",
             "split the atom", "cross the Sahara by car", "win five Wimbledon titles",
             "fly a powered airplane", "reach the North Pole", "dive to the deepest trench"),
    "concept": ("entropy", "irony", "inflation", "photosynthesis", "democracy", "karma",
                "osmosis", "nostalgia", "gravity", "a black hole", "a sonnet", "déjà vu",
                "the placebo effect", "a haiku", "supply and demand", "a metaphor",
                "photosynthesis in algae", "a tsunami", "an eclipse", "a recession", "stoicism",
                "the greenhouse effect", "a sonata", "the Renaissance", "plate tectonics"),
    "process": ("bake sourdough bread", "tie a bowline knot", "remove a wine stain",
                "train a puppy", "grow tomatoes indoors", "change a flat tire",
                "make paper from wood", "brew green tea", "start a campfire",
                "knit a scarf", "clean a cast iron pan", "fold a paper crane", "jump-start a car",
                "press flowers", "make yogurt at home", "unclog a drain"),
    "phenomenon": ("the sky look blue", "thunder follow lightning", "ice float on water",
                   "the moon have phases", "leaves change color in autumn",
                   "bread rise", "cats purr", "the ocean taste salty", "hiccups start",
                   "onions make you cry", "stars twinkle", "metal feel cold", "we yawn",
                   "popcorn pop", "the sea have tides", "rainbows form"),
    "country": ("Peru", "Norway", "Kenya", "Vietnam", "Portugal", "Chile", "Mongolia",
                "Egypt", "Canada", "Nepal", "Hungary", "Morocco", "Bolivia", "Iceland",
                "Ghana", "Finland", "Laos", "Ecuador", "Greece", "Ireland", "Tunisia",
                "Uruguay", "Cambodia", "Austria", "Jamaica"),
    "animal": ("giraffe", "octopus", "honeybee", "blue whale", "cheetah", "penguin",
               "elephant", "hummingbird", "koala", "snail", "bat", "crocodile", "ostrich",
               "walrus", "beaver", "flamingo", "tortoise", "wolf", "jaguar", "panda"),
    "sport": ("baseball", "tennis", "chess", "rugby", "golf", "cricket", "hockey",
              "fencing", "polo", "volleyball", "curling", "lacrosse", "badminton",
              "water polo", "sumo", "squash"),
    "event": ("the Battle of Hastings", "the first Olympic Games", "the fall of the Berlin Wall",
              "the sinking of the Titanic", "the Boston Tea Party", "the moon landing",
              "the signing of the Magna Carta", "the invention of paper",
              "the Great Fire of London", "the first transatlantic flight",
              "the eruption of Vesuvius", "the Gold Rush", "the first modern marathon"),
    "measure": ("miles of coastline", "bones", "keys", "islands", "time zones", "teeth",
                "strings", "players", "moons", "chambers", "squares", "ribs", "pieces",
                "countries", "provinces", "lakes"),
    "container": ("an adult skeleton", "a standard piano", "a chess set", "a rugby team",
                  "the solar system", "a violin", "a mouse's heart", "Indonesia", "Russia",
                  "a deck of cards", "a cricket team", "a hand", "Canada", "a guitar",
                  "an octopus", "Africa"),
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
            "What is {acr} an acronym for?",
            "Expand the letters {acr}, please.",
            "In full, what is {acr}?",
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
            "What currency is used in {country}?",
            "What food did {person} love most?",
            "Which {sport} club is the oldest in {country}?",
            "What is the favourite snack of a {animal}?",
        ),
        "description and abstract concept": (
            "What is {concept}?",
            "Why does {phenomenon}?",
            "How do you {process}?",
            "What is the meaning of {concept} in everyday life?",
            "Explain why {phenomenon}.",
            "What is the difference between {concept} and {concept2}?",
            "How does a {animal} sleep?",
            "Why do people say {concept} matters?",
            "What is a simple way to explain {concept} to a child?",
            "What makes {phenomenon} happen, scientifically?",
        ),
        "human being": (
            "Who invented the {invention}?",
            "Who wrote {book}?",
            "Who was the first person to {feat}?",
            "Who painted the portrait of {person}?",
            "Who was the teacher of {person}?",
            "Who designed {thing}?",
            "What was the name of the wife of {person}?",
            "Who was the first king of {country}?",
            "Who translated {book} into English?",
            "Who coached the national {sport} team of {country}?",
        ),
        "location": (
            "Where is {thing}?",
            "Where was {person} born?",
            "What country borders {country} to the north?",
            "Where do {animal}s live in the wild?",
            "In what city did {event} take place?",
            "What is the capital of {country}?",
            "Where can you see {thing} today?",
            "In which country did {person} die?",
            "Which city hosted {event}?",
            "Where did {person} go to school?",
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
            "How long does a {animal} live?",
            "In what year did {person} die?",
            "How many people play {sport} in {country}?",
        ),
    },
    fillers={**_TREC_FILLERS, "concept2": _TREC_FILLERS["concept"]},
    wrappers=("{}", "Quick question - {}", "Trivia night: {}", "{} Thanks in advance.",
              "Can anyone tell me: {}", "Homework help - {}", "{} (for a quiz)",
              "I always wondered: {}", "Pub quiz: {}", "Q. {}", "Settle a bet: {}",
              "{} My teacher asked us this.", "Random thought: {}", "Crossword clue - {}",
              "{} (bonus round)", "Family quiz: {}"),
    tails=("", " Thanks!", " Anyone?", " Just curious.", " I forgot.", " Cheers.",
           " Please reply.", " Asking for my kid.", " No googling!", " Answer fast please."),
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

_IMDB_MORE = {
    "who": ("my partner", "my brother", "the whole family", "a friend from work", "my kids",
            "my grandmother", "the film club", "my flatmate", "two colleagues", "my sister"),
    "when": ("on a rainy Sunday", "at a midnight screening", "on a long flight",
             "after a hard week", "at the local cinema", "on opening night", "on a streaming whim",
             "at a festival", "on a school night", "during the holidays"),
}
IMDB = Dataset(
    name="imdb",
    description="movie reviews",
    labels=("negative", "positive"),
    templates={
        "positive": IMDB.templates["positive"] + (
            "Watched {film} with {who} {when}; {part} had us all cheering and {film} is {praise}.",
            "I rarely write reviews, but {film} is {praise}. {part} stayed with me for days.",
            "Saw {film} {when} and it was {praise}; {who} wants to go again because of {part}.",
            "Every scene of {film} earns its place. {part} is {praise}, and {who} agreed.",
            "If {part} is anything to go by, the director is a talent: {film} is {praise}.",
        ),
        "negative": IMDB.templates["negative"] + (
            "Watched {film} with {who} {when}; {part} had us checking our phones and {film} is {scorn}.",
            "I rarely write reviews, but {film} is {scorn}. {part} felt like an afterthought.",
            "Saw {film} {when} and it was {scorn}; {who} fell asleep before {part} even started.",
            "Nothing in {film} earns its place. {part} is {scorn}, and {who} agreed.",
            "If {part} is anything to go by, nobody cared: {film} is {scorn}.",
        ),
    },
    fillers={**_REVIEW_FILLERS, **_IMDB_MORE},
)

_SMS_FILLERS = {
    "name": ("Sam", "Priya", "Tom", "Aisha", "Ben", "Lucy", "Raj", "Maya", "Joe", "Nina", "Dev",
             "Kate", "Omar", "Zoe", "Leo", "Ivy"),
    "place": ("the station", "the pub", "Tesco", "the gym", "uni", "the cinema", "mum's",
              "the library", "the bus stop", "work", "the park", "the chippy"),
    "time": ("7", "half 8", "noon", "after lunch", "tonight", "tmrw morning", "in 10 mins",
             "around 6", "later", "after class"),
    "thing": ("the keys", "my charger", "the tickets", "some milk", "your jumper", "the notes",
              "the cake", "a brolly", "the receipt", "my headphones"),
    "prize": ("a 2000 cash award", "a brand new mobile", "a luxury cruise", "500 shopping vouchers",
              "a free camcorder", "a weekend break", "1000 in gift cards", "a holiday for two"),
    "code": ("CLAIM", "WIN", "GO", "PRIZE", "YES", "STOP", "BONUS", "REPLY"),
    "num": ("80086", "87121", "69669", "85023", "81010", "88039", "62468", "83355"),
    "fee": ("1.50", "3", "2.50", "0.75", "4.50", "1"),
}
SPAM = Dataset(
    name="spam",
    description="text messages",
    labels=("ham", "spam"),
    templates={
        "ham": (
            "Hey {name}, u still coming to {place} at {time}?",
            "Can you grab {thing} on your way back from {place}",
            "Running late, be at {place} {time}. Sorry!!",
            "{name} says hi. Did you find {thing}?",
            "Ok see you at {place} then. Dont forget {thing} lol",
            "Just got to {place}, where r u? Call me {time}",
            "Thanks for {thing} yesterday, {name} loved it",
            "I left {thing} at {place}, can u check {time}?",
        ),
        "spam": (
            "URGENT! You have won {prize}. Text {code} to {num} now. {fee}/msg",
            "Congratulations! Your number was selected for {prize}. Call {num} to collect. T&Cs apply",
            "FREE entry to our weekly draw for {prize}! Txt {code} to {num}. Cost {fee} per week",
            "Final notice: {prize} is waiting for you. Reply {code} before midnight. {fee}/min",
            "You are a WINNER! Claim {prize} today by texting {code} to {num}",
            "Exclusive offer: {prize} for loyal customers. Send {code} to {num}, {fee} per txt",
            "Your mobile account is due an upgrade plus {prize}. Call {num} free now",
            "Last chance! {prize} reserved in your name. Text {code} to {num} to opt in",
        ),
    },
    fillers=_SMS_FILLERS,
    tails=("", " x", " :)", " ok?", " !", " xx", " ;)", " .."),
    wrappers=("{}", "Fwd: {}", "{} (sent from my phone)", "RE: {}", "{} [1/1]", "Msg: {}"),
)

_NEWS_FILLERS = {
    "country": ("Brazil", "Japan", "Kenya", "Ukraine", "Chile", "Indonesia", "Egypt", "Norway",
                "Pakistan", "Peru", "Vietnam", "Nigeria", "Poland", "Iraq", "Sudan"),
    "leader": ("the prime minister", "the foreign minister", "rebel leaders", "the president",
               "UN envoys", "opposition groups", "peace negotiators", "the parliament"),
    "team": ("the Red Sox", "Manchester United", "the Lakers", "the All Blacks", "Real Madrid",
             "the Yankees", "Ferrari", "the Packers", "Arsenal", "the Celtics", "Juventus"),
    "athlete": ("Serena Williams", "Tiger Woods", "Roger Federer", "Michael Phelps",
                "Lance Armstrong", "Yao Ming", "Maria Sharapova", "Wayne Rooney"),
    "firm": ("Oracle", "Wal-Mart", "Boeing", "Ford", "Citigroup", "Nestle", "Sony", "Airbus",
             "Exxon", "Pfizer", "Kmart", "Vodafone"),
    "gadget": ("a new chip", "a handheld player", "a search tool", "a spam filter",
               "a fuel cell", "a space probe", "a gene map", "a browser update", "a robot arm"),
    "lab": ("NASA", "IBM researchers", "Microsoft", "Google", "a Stanford team", "Intel",
            "astronomers", "Apple", "Nokia"),
    "pct": ("3", "7", "12", "2.5", "18", "40", "5"),
}
AGNEWS = Dataset(
    name="agnews",
    description="short news articles",
    labels=("World", "Sports", "Business", "Sci/Tech"),
    templates={
        "World": (
            "Talks collapse in {country}. {leader} walked out of the meeting on Tuesday, officials said.",
            "Clashes leave dozens dead in {country}. Troops were sent after {leader} called for calm.",
            "{country} votes amid tension. Observers say {leader} face a tight race.",
            "Aid reaches flood victims in {country}. {leader} promised further help.",
            "Embassy attacked in {country}. {leader} condemned the assault and closed the border.",
        ),
        "Sports": (
            "{team} rally late to win. {athlete} scored twice as the visitors held on.",
            "{athlete} withdraws with injury. {team} will start the season without a key player.",
            "{team} clinch the title. Fans celebrated after {athlete} sealed the final game.",
            "{athlete} sets a new record. The crowd rose as {team} lost in the semifinal.",
            "Coach fired after {team} slump. {athlete} said the squad had lost its way.",
        ),
        "Business": (
            "{firm} profit jumps {pct} percent. Shares rose as quarterly sales beat forecasts.",
            "{firm} to cut jobs. The company said costs had risen {pct} percent this year.",
            "Oil prices climb {pct} percent. {firm} warned that fuel costs would squeeze margins.",
            "{firm} agrees to buy a rival. The deal values the target at a {pct} percent premium.",
            "Stocks slide on rate fears. {firm} led the decline, falling {pct} percent.",
        ),
        "Sci/Tech": (
            "{lab} unveils {gadget}. The device could reach shops by next spring.",
            "{lab} reports progress on {gadget}. Tests showed a {pct} percent gain in speed.",
            "Hackers target {lab}. A flaw in {gadget} left millions of users exposed.",
            "{lab} launches {gadget}. Engineers hope it will map distant planets.",
            "Open-source rival to {gadget} gains ground. {lab} says it will respond soon.",
        ),
    },
    fillers=_NEWS_FILLERS,
    tails=("", " (AP)", " (Reuters)", " (AFP)", " (CP)", " (Canadian Press)", " - report",
           " (dpa)"),
)

_KINDS = {
    "animal": ("dog", "cat", "horse", "cow", "sparrow", "salmon", "frog", "whale", "spider", "ant",
               "snake", "rabbit", "goat", "eagle", "shark", "beetle", "lizard", "parrot", "otter",
               "camel"),
    "tool": ("hammer", "screwdriver", "saw", "wrench", "chisel", "drill", "shovel", "rake",
             "pliers", "trowel", "axe", "file"),
    "fruit": ("apple", "banana", "cherry", "mango", "pear", "plum", "peach", "lemon", "grape",
              "apricot", "kiwi", "fig"),
    "vehicle": ("bus", "tram", "bicycle", "truck", "van", "scooter", "taxi", "ferry", "tractor",
                "motorbike", "canoe", "glider"),
    "musical instrument": ("violin", "cello", "trumpet", "flute", "piano", "harp", "drum",
                           "clarinet", "banjo", "oboe", "tuba", "ukulele"),
    "piece of furniture": ("sofa", "wardrobe", "stool", "bookcase", "bench", "dresser",
                           "armchair", "cupboard", "bed", "desk", "cabinet", "ottoman"),
    "vegetable": ("carrot", "onion", "leek", "cabbage", "potato", "turnip", "radish", "spinach",
                  "celery", "parsnip", "broccoli", "courgette"),
    "piece of clothing": ("shirt", "scarf", "jacket", "sock", "glove", "skirt", "coat", "hat",
                          "sweater", "blouse", "waistcoat", "cardigan"),
}
_KIND_FRAMES = ("{a} {x} is {neg}a kind of {k}", "{a} {x} is {neg}a type of {k}",
                "{a} {x} is {neg}an example of {ka}", "{a} {x} can{nt} be described as {ka}",
                "{a} {x} is {neg}one of the {k}s", "{a} {x} is {neg}classed as {ka}")


def _article(word: str) -> str:
    return "An" if word[0] in "aeio" else "A"


def _kind_claims(member: bool, negated: bool) -> tuple[str, ...]:
    """'X is (not) a kind of K' claims; a claim holds exactly when ``member != negated``."""
    out = []
    for k, items in _KINDS.items():
        for x in items:
            targets = [k] if member else [o for o in _KINDS if o != k]
            for t in targets:
                ka = f"{_article(t).lower()} {t}"
                for frame in _KIND_FRAMES:
                    out.append(frame.format(a=_article(x), x=x, k=t, ka=ka,
                                            neg="not " if negated else "",
                                            nt="not" if negated else ""))
    return tuple(out)


_CLAIM_FILLERS = {  # members and non-members drawn equally often (one template each)
    "hold_m": _kind_claims(True, False), "hold_n": _kind_claims(False, True),
    "fail_m": _kind_claims(True, True), "fail_n": _kind_claims(False, False),
}
NEGATION = Dataset(
    name="negation",
    description="sentences",
    labels=("True", "False"),
    templates={"True": ("{hold_m}.", "{hold_n}."), "False": ("{fail_m}.", "{fail_n}.")},
    fillers=_CLAIM_FILLERS,
    wrappers=("{}", "Claim: {}", "{} (quiz item)", "Statement: {}", "Fact check: {}",
              "{} (from a worksheet)", "Assertion: {}", "{} (heard in class)"),
)

_YAHOO_FILLERS = {
    "x": ("my neighbour", "my teenage son", "my landlord", "a coworker", "my best mate",
          "my girlfriend", "my dad", "my roommate", "my boss", "my cousin", "my aunt",
          "my husband", "a guy at the gym", "my grandad", "my little brother", "my tutor",
          "my wife", "an old classmate", "my uncle", "the lady next door"),
    "y": ("2", "3", "4", "5", "6", "8", "10", "12", "15", "20"),
}
YAHOO = Dataset(
    name="yahoo",
    description="Yahoo Answers questions",
    labels=("Society & Culture", "Science & Mathematics", "Health", "Education & Reference",
            "Computers & Internet", "Sports", "Business & Finance", "Entertainment & Music",
            "Family & Relationships", "Politics & Government"),
    templates={
        "Society & Culture": (
            "Why do people throw rice at weddings? {x} asked me and I had no idea.",
            "What is the origin of the tradition of lanterns at new year? Asking for {x}.",
            "Is it rude to refuse food at a host's dinner? {x} says it is.",
            "Why do some religions fast for {y} days? Just curious about the customs.",
            "Is it ok to wear white to a wedding? {x} did it {y} years ago.",
            "Why do people tip {y} percent in some countries and nothing in others? {x} asked.",
        ),
        "Science & Mathematics": (
            "How do I solve x squared plus {y}x equals zero? My homework is due tomorrow.",
            "Why does ice float on water? {x} could not explain it.",
            "What is the derivative of x to the power {y}? Please show the steps.",
            "How far away is the nearest star in light years? {x} guessed {y}.",
            "What is {y} factorial and why is it so big? {x} was surprised.",
            "Why do magnets attract iron? {x} asked me and I blanked.",
        ),
        "Health": (
            "I have had a headache for {y} days, should I see a doctor? {x} thinks it's stress.",
            "Is it bad to sleep only {y} hours a night? I feel tired all day.",
            "What helps with a sore throat besides tea? {x} swears by honey.",
            "How many calories should I eat to lose {y} pounds? Any diet tips?",
            "My knee hurts after running {y} miles, is it serious? {x} says rest it.",
            "Is drinking {y} coffees a day bad for your heart? {x} drinks more.",
        ),
        "Education & Reference": (
            "How do I write a bibliography in APA style? My essay is due in {y} days.",
            "What does the word 'ubiquitous' mean and how do you use it in a sentence?",
            "Which college has the best nursing program? {x} is applying next year.",
            "How do I study for a test in {y} hours without panicking?",
            "What is the plural of cactus? {x} and I argued for {y} minutes.",
            "Is it worth doing a masters degree at {y}0? {x} thinks I am too old.",
            "How do I cite a website in an essay? {x} says footnotes.",
        ),
        "Computers & Internet": (
            "My laptop keeps freezing after {y} minutes, how do I fix it? {x} said to reinstall.",
            "How do I stop pop-ups in my browser? They appear every {y} seconds.",
            "What is the best free antivirus? {x} got a virus from an email.",
            "Why is my wifi so slow at night? I pay for {y} megabits.",
            "How do I recover a deleted file from {y} days ago? {x} deleted it.",
            "Which laptop is best for coding under {y}00 dollars? {x} wants a Mac.",
        ),
        "Sports": (
            "Who will win the World Cup this year? {x} bets on Brazil.",
            "How do I improve my free throw percentage? I miss {y} out of 10.",
            "Is it offside if the ball is played backwards? Soccer rules confuse me.",
            "Which golf club should I use from {y}0 yards out?",
            "How many laps of a pool is a mile? {x} swims {y} a day.",
            "Who was the greatest boxer ever? {x} says Ali, I say Tyson.",
            "How do I get faster at the 100 metres? My best is {y} seconds over 10.",
        ),
        "Business & Finance": (
            "Should I pay off my credit card or save {y} percent of my paycheck? {x} says save.",
            "How do I start a small bakery with little money?",
            "What is a good stock to buy for {y} years? Thinking of index funds.",
            "How do I file taxes if I worked {y} part-time jobs last year?",
            "Is it smart to buy a house with {y} percent down? {x} says wait.",
            "How do I ask for a raise after {y} years in the same job? {x} never asked.",
        ),
        "Entertainment & Music": (
            "What is the name of the song that goes 'la la la' in the car advert? {x} keeps humming it.",
            "Who is the best guitarist of all time? {x} says Hendrix.",
            "When does season {y} of that vampire show come out on TV?",
            "Any good movies like The Matrix? I have watched it {y} times.",
            "Who sang that 80s song about the rain? {x} has been humming it for {y} days.",
            "Which band should I see live this summer? {x} has {y} spare tickets.",
        ),
        "Family & Relationships": (
            "My boyfriend forgot my birthday again, should I break up? {x} says yes.",
            "How do I tell my parents I want to move out at {y}?",
            "{x} keeps borrowing money and never pays back, what do I do?",
            "Is it normal to argue with your spouse {y} times a week?",
            "{x} has not called me in {y} weeks, should I reach out first?",
            "How do I get my {y} year old to sleep through the night? {x} has tips.",
        ),
        "Politics & Government": (
            "Why do we have an electoral college instead of a popular vote? {x} disagrees with it.",
            "Can a senator serve more than {y} terms? How do term limits work?",
            "What does the vice president actually do all day?",
            "Should the voting age be lowered to 16? {x} thinks so.",
            "How does a bill become a law in {y} steps? {x} explained it badly.",
            "Why do mayors serve {y} year terms? {x} wants them longer.",
        ),
    },
    fillers=_YAHOO_FILLERS,
    tails=("", " Thanks!", " Cheers.", " (asking for a friend)", " Any ideas?", " Need answers fast.",
           " Be honest.", " Sorry for my english.", " Best answer gets points.", " x"),
    wrappers=("{}", "{} Please help!", "Quick one: {}", "{} Thanks everyone.", "Serious answers only. {}",
              "{} Any advice appreciated.", "Been wondering for ages: {}",
              "{} 10 points for the best answer!", "Help!! {}", "{} Thx in advance",
              "Random question: {}", "{} Please no rude answers."),
)

_STYLE_FILLERS = {
    "topic": ("the quarterly report", "the committee's decision", "the proposed amendment",
              "the research findings", "the budget allocation", "the hiring policy",
              "the merger agreement", "the safety protocol", "the survey results",
              "the draft legislation", "the annual audit", "the revised timetable",
              "the tender process", "the staff appraisal scheme", "the procurement review",
              "the pension consultation", "the grant application", "the planning permission",
              "the data protection policy", "the shareholder resolution"),
    "thing": ("that show", "the new phone", "this song", "my ex", "the party", "the game",
              "that meme", "the pizza place", "my car", "that video", "the concert",
              "my new sneakers", "that tiktok", "the burger joint", "my roomie", "this weather",
              "the season finale", "my haircut", "the gym", "that podcast"),
    "slang": ("lol", "tbh", "omg", "smh", "ngl", "haha", "lmao", "idk", "fr", "bruh", "ikr",
              "lowkey", "rn", "welp"),
    "body": ("The board", "The committee", "The council", "The steering group", "Management",
             "The review panel", "The trustees", "The directorate", "The audit office",
             "The executive team", "The secretariat", "The working group"),
    "when": ("by the end of the month", "within ten working days", "at the next meeting",
             "before the close of the financial year", "in due course", "by Friday next",
             "prior to the annual general meeting", "within the statutory period",
             "at its earliest convenience", "following the consultation period"),
    "mate": ("my bro", "jess", "the whole squad", "my cousin", "ur mum", "dave from work",
             "my roomie", "everyone at school", "my lil sis", "the guys"),
    "feel": ("obsessed", "so done", "dead", "shook", "vibing", "mad", "hyped", "bored af",
             "crying", "over it"),
}
FORMALITY = Dataset(
    name="formality",
    description="sentences",
    labels=("formal", "informal"),
    templates={
        "formal": (
            "We regret to inform you that {topic} has been postponed until further notice.",
            "{body} has reviewed {topic} and will issue its recommendations {when}.",
            "Please find attached a summary of {topic} for your consideration {when}.",
            "It is the considered opinion of {body2} that {topic} warrants further examination.",
            "Kindly direct any inquiries regarding {topic} to {body2} {when}.",
            "In accordance with established procedure, {topic} shall be circulated {when}.",
            "{body} wishes to acknowledge receipt of {topic} and will respond {when}.",
            "Members are requested to review {topic} and submit their observations {when}.",
            "{body} has resolved that {topic} be deferred and reconsidered {when}.",
        ),
        "informal": (
            "{slang} {thing} was soooo good, u gotta check it out",
            "cant believe {thing} did that {slang}, {mate} is {feel}",
            "yo did u see {thing}?? {slang}",
            "{thing} is kinda meh tbh, not gonna lie {slang}",
            "ugh {thing} again... whatever {slang}",
            "me and {mate} totally loved {thing} {slang}",
            "{mate} showed me {thing} and im {feel} {slang}",
            "not {thing} making me {feel} again {slang}",
            "{thing} rn >>> everything, {mate} agrees {slang}",
        ),
    },
    fillers={**_STYLE_FILLERS, "body2": tuple(b[0].lower() + b[1:] for b in _STYLE_FILLERS["body"])},
    label_wrappers={
        "formal": ("{}", "{} Thank you for your attention.", "Dear colleagues, {}", "{} Regards.",
                   "To whom it may concern: {}", "{} We appreciate your patience.",
                   "Dear Sir or Madam, {}", "{} Yours faithfully.", "Further to our letter, {}",
                   "{} Your cooperation is appreciated."),
        "informal": ("{}", "{} !!!", "dude {}", "{} :)", "sooo {}", "{} xD", "ok so {}",
                     "{} lol", "guys {}", "{} <3"),
    },
)

_NLI_FILLERS = {
    "who": ("The chef", "A student", "The mayor", "An old man", "The pilot", "A nurse",
            "Two children", "The band", "A farmer", "The lawyer", "The baker", "A tourist",
            "The night guard", "A young couple", "The coach", "An architect", "The twins",
            "A postwoman", "The vet", "A retired teacher"),
    "act": ("cooked dinner for the guests", "walked to the station", "signed the agreement",
            "painted the fence", "read the letter aloud", "planted tomatoes", "fixed the roof",
            "sang at the festival", "fed the ducks", "washed the van", "wrote a short poem",
            "repaired the old clock", "swept the courtyard", "carried the boxes upstairs",
            "ordered a pizza", "locked the gate"),
    "place": ("in the morning", "last Tuesday", "before noon", "in the rain", "at the market",
              "near the river", "after lunch", "at the harbour", "on Sunday", "in the garden",
              "late at night", "behind the church"),
}
MULTINLI = Dataset(
    name="multinli",
    description="pairs of sentences",
    labels=("entailment", "neutral", "contradiction"),
    templates={
        "entailment": (
            "{who} {act} {place}. -> Someone {act}.",
            "{who} {act} {place}. -> Something happened {place}.",
            "{who} {act} with great care {place}. -> {who} {act}.",
            "{who} {act} {place} and then left. -> {who} {act} before leaving.",
        ),
        "neutral": (
            "{who} {act} {place}. -> {who} was paid well for it.",
            "{who} {act} {place}. -> It was the first time {who} had done so.",
            "{who} {act} {place}. -> A crowd gathered to watch.",
            "{who} {act} {place}. -> {who} was in a hurry.",
        ),
        "contradiction": (
            "{who} {act} {place}. -> Nobody {act} {place}.",
            "{who} {act} {place}. -> {who} stayed home and did nothing at all.",
            "{who} {act} {place}. -> {who} refused to do anything {place}.",
            "{who} {act} {place}. -> {who} was abroad and never {act}.",
        ),
    },
    fillers=_NLI_FILLERS,
)

_METAPHOR_FILLERS = {
    "person": ("My brother", "The new manager", "Her grandmother", "That senator", "Our coach",
               "The landlord", "My teacher", "His partner", "The captain", "My aunt",
               "The old baker", "Our neighbour", "The young pilot", "My classmate", "The judge",
               "Her uncle", "The shop owner", "Our nurse", "The drummer", "My boss",
               "The mayor", "My grandfather", "The new intern", "Our landlady", "The referee",
               "My flatmate", "The head chef", "Her cousin", "The ferry captain", "Our vicar",
               "The night nurse", "My godmother", "The team captain", "Our postman",
               "The new tenant", "His stepfather", "The librarian", "My piano tutor",
               "The bus driver", "Our accountant", "The lifeguard", "My oldest friend",
               "The school nurse", "Her grandson", "The plumber", "Our headteacher",
               "The second violinist", "My brother-in-law", "The goalkeeper", "Our mechanic"),
}
METAPHORS = Dataset(
    name="metaphors",
    description="pairs of sentences",
    labels=("correct", "incorrect"),
    templates={
        "correct": (
            "{person} is a rock. <--> {person} is dependable and steady.",
            "{person} has a heart of gold. <--> {person} is very kind.",
            "{person} is a night owl. <--> {person} stays up late.",
            "{person} is drowning in paperwork. <--> {person} has too many documents to handle.",
            "{person} got cold feet. <--> {person} became nervous and hesitated.",
            "{person} is a walking encyclopedia. <--> {person} knows a great many facts.",
            "{person} has a green thumb. <--> {person} is good at growing plants.",
            "{person} is on cloud nine. <--> {person} is extremely happy.",
            "{person} spilled the beans. <--> {person} revealed a secret.",
            "{person} is a couch potato. <--> {person} spends a lot of time sitting and watching TV.",
            "{person} broke the ice. <--> {person} eased the tension at the start of the meeting.",
            "{person} has butterflies in the stomach. <--> {person} feels nervous.",
            "{person} is a bookworm. <--> {person} loves reading.",
            "{person} hit the books. <--> {person} studied hard.",
            "{person} has a memory like a sieve. <--> {person} forgets things easily.",
            "{person} is the black sheep of the family. <--> {person} is the odd one out among relatives.",
            "{person} let the cat out of the bag. <--> {person} told everyone the plan by accident.",
            "{person} is a fish out of water. <--> {person} feels out of place.",
        ),
        "incorrect": (
            "{person} is a rock. <--> {person} is made of stone.",
            "{person} has a heart of gold. <--> {person} had surgery with metal parts.",
            "{person} is a night owl. <--> {person} is a bird with feathers.",
            "{person} is drowning in paperwork. <--> {person} fell into a pool of water.",
            "{person} got cold feet. <--> {person} forgot to wear socks in winter.",
            "{person} is a walking encyclopedia. <--> {person} is a printed book on legs.",
            "{person} has a green thumb. <--> {person} painted a finger green.",
            "{person} is on cloud nine. <--> {person} is flying in an airplane.",
            "{person} spilled the beans. <--> {person} knocked over a tin of beans.",
            "{person} is a couch potato. <--> {person} is a vegetable lying on a sofa.",
            "{person} broke the ice. <--> {person} smashed a frozen pond with a hammer.",
            "{person} has butterflies in the stomach. <--> {person} swallowed some insects.",
            "{person} is a bookworm. <--> {person} is a worm that lives in books.",
            "{person} hit the books. <--> {person} punched a pile of books.",
            "{person} has a memory like a sieve. <--> {person} has a kitchen strainer for a brain.",
            "{person} is the black sheep of the family. <--> {person} is a dark-wooled farm animal.",
            "{person} let the cat out of the bag. <--> {person} opened a sack holding a cat.",
            "{person} is a fish out of water. <--> {person} is a fish flopping on the shore.",
        ),
    },
    fillers=_METAPHOR_FILLERS,
    wrappers=("{}", "Statement and reading: {}", "{} (from a story)", "{} (overheard at dinner)",
              "Line and gloss: {}", "{} (from a school essay)", "Sentence pair: {}",
              "{} (from a letter)", "Quote and meaning: {}", "{} (from a novel)",
              "{} (heard on the radio)", "Saying and paraphrase: {}"),
)

_APP_FILLERS = {
    "app": ("the photo editor", "this calendar app", "the banking app", "this keyboard",
            "the weather widget", "this music player", "the notes app", "the fitness tracker",
            "this launcher", "the file manager", "the podcast app", "this VPN", "the map app",
            "the recipe app", "this alarm clock", "the PDF reader", "the budgeting app",
            "this browser"),
    "feat": ("the sync", "the dark mode", "the search", "the widgets", "the backup",
             "the notifications", "the latest update", "the layout", "the login", "the export",
             "the offline mode", "the sharing button", "the home screen", "the settings page"),
    "days": ("two days", "a week", "a month", "three months", "a year", "ten minutes"),
}
APP_REVIEWS = Dataset(
    name="app_reviews",
    description="reviews of software applications",
    labels=("negative", "positive"),
    templates={
        "positive": (
            "Love {app}, {feat} works perfectly. Five stars",
            "Great app! {feat} is fast and simple",
            "{app} does exactly what I need and {feat} is brilliant",
            "Best one I have tried, {feat} saves me so much time",
            "Really useful, {app} never lets me down. Thanks devs",
            "Been using {app} for {days} and {feat} keeps getting better",
            "{feat} in {app} is so smooth, worth every penny",
            "Switched to {app} {days} ago, {feat} is miles ahead of the rest",
        ),
        "negative": (
            "{app} keeps crashing since {feat} changed. Uninstalled",
            "Terrible, {feat} never works and support ignores me",
            "{app} drains my battery and {feat} is broken. One star",
            "Worst update ever, {feat} deleted my data",
            "Useless, {app} freezes every time I open {feat}",
            "Used {app} for {days} and {feat} still fails every single time",
            "{feat} in {app} is a mess, please fix it",
            "Gave {app} {days} to improve, {feat} only got worse",
        ),
    },
    fillers=_APP_FILLERS,
    tails=("", " (phone model: Pixel)", " - on Android 12", " via the store app", " #review", " :/",
           " ...", " (3rd review)"),
    wrappers=("{}", "{}!", "Update: {}", "{} - edited after a week", "Honestly, {}", "{} (on my tablet)",
              "{}. Version 2.3", "After two months of use: {}"),
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (
    TREC_COARSE, SPAM, IMDB, AGNEWS, NEGATION, YAHOO, FORMALITY, MULTINLI, METAPHORS,
    APP_REVIEWS)}
