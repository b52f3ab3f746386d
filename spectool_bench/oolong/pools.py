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
    wrappers=("{}", "Quick question - {}", "Trivia night: {}", "{} Thanks in advance.",
              "Can anyone tell me: {}", "Homework help - {}", "{} (for a quiz)",
              "I always wondered: {}", "Pub quiz: {}", "Q. {}", "Settle a bet: {}",
              "{} My teacher asked us this."),
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
)

_YAHOO_FILLERS = {
    "x": ("my neighbour", "my teenage son", "my landlord", "a coworker", "my best mate",
          "my girlfriend", "my dad", "my roommate", "my boss", "my cousin"),
    "y": ("2", "3", "5", "10", "15", "20"),
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
        ),
        "Science & Mathematics": (
            "How do I solve x squared plus {y}x equals zero? My homework is due tomorrow.",
            "Why does ice float on water? {x} could not explain it.",
            "What is the derivative of x to the power {y}? Please show the steps.",
            "How far away is the nearest star in light years? {x} guessed {y}.",
        ),
        "Health": (
            "I have had a headache for {y} days, should I see a doctor? {x} thinks it's stress.",
            "Is it bad to sleep only {y} hours a night? I feel tired all day.",
            "What helps with a sore throat besides tea? {x} swears by honey.",
            "How many calories should I eat to lose {y} pounds? Any diet tips?",
        ),
        "Education & Reference": (
            "How do I write a bibliography in APA style? My essay is due in {y} days.",
            "What does the word 'ubiquitous' mean and how do you use it in a sentence?",
            "Which college has the best nursing program? {x} is applying next year.",
            "How do I study for a test in {y} hours without panicking?",
        ),
        "Computers & Internet": (
            "My laptop keeps freezing after {y} minutes, how do I fix it? {x} said to reinstall.",
            "How do I stop pop-ups in my browser? They appear every {y} seconds.",
            "What is the best free antivirus? {x} got a virus from an email.",
            "Why is my wifi so slow at night? I pay for {y} megabits.",
        ),
        "Sports": (
            "Who will win the World Cup this year? {x} bets on Brazil.",
            "How do I improve my free throw percentage? I miss {y} out of 10.",
            "Is it offside if the ball is played backwards? Soccer rules confuse me.",
            "Which golf club should I use from {y}0 yards out?",
        ),
        "Business & Finance": (
            "Should I pay off my credit card or save {y} percent of my paycheck? {x} says save.",
            "How do I start a small bakery with little money?",
            "What is a good stock to buy for {y} years? Thinking of index funds.",
            "How do I file taxes if I worked {y} part-time jobs last year?",
        ),
        "Entertainment & Music": (
            "What is the name of the song that goes 'la la la' in the car advert? {x} keeps humming it.",
            "Who is the best guitarist of all time? {x} says Hendrix.",
            "When does season {y} of that vampire show come out on TV?",
            "Any good movies like The Matrix? I have watched it {y} times.",
        ),
        "Family & Relationships": (
            "My boyfriend forgot my birthday again, should I break up? {x} says yes.",
            "How do I tell my parents I want to move out at {y}?",
            "{x} keeps borrowing money and never pays back, what do I do?",
            "Is it normal to argue with your spouse {y} times a week?",
        ),
        "Politics & Government": (
            "Why do we have an electoral college instead of a popular vote? {x} disagrees with it.",
            "Can a senator serve more than {y} terms? How do term limits work?",
            "What does the vice president actually do all day?",
            "Should the voting age be lowered to 16? {x} thinks so.",
        ),
    },
    fillers=_YAHOO_FILLERS,
    tails=("", " Thanks!", " Cheers.", " (asking for a friend)", " Any ideas?", " Need answers fast.",
           " Be honest.", " Sorry for my english.", " Best answer gets points.", " x"),
    wrappers=("{}", "{} Please help!", "Quick one: {}", "{} Thanks everyone.", "Serious answers only. {}",
              "{} Any advice appreciated.", "Been wondering for ages: {}",
              "{} 10 points for the best answer!"),
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
    "slang": ("lol", "tbh", "omg", "smh", "ngl", "haha", "lmao", "idk"),
}
FORMALITY = Dataset(
    name="formality",
    description="sentences",
    labels=("formal", "informal"),
    templates={
        "formal": (
            "We regret to inform you that {topic} has been postponed until further notice.",
            "The board has reviewed {topic} and will issue its recommendations shortly.",
            "Please find attached a summary of {topic} for your consideration.",
            "It is our considered opinion that {topic} warrants further examination.",
            "Kindly direct any inquiries regarding {topic} to the office of the secretary.",
            "In accordance with established procedure, {topic} shall be circulated to all members.",
        ),
        "informal": (
            "{slang} {thing} was soooo good, u gotta check it out",
            "cant believe {thing} did that {slang}",
            "yo did u see {thing}?? {slang}",
            "{thing} is kinda meh tbh, not gonna lie {slang}",
            "ugh {thing} again... whatever {slang}",
            "me and my buddies totally loved {thing} {slang}",
        ),
    },
    fillers=_STYLE_FILLERS,
    label_wrappers={
        "formal": ("{}", "{} Thank you for your attention.", "Dear colleagues, {}", "{} Regards.",
                   "To whom it may concern: {}", "{} We appreciate your patience."),
        "informal": ("{}", "{} !!!", "dude {}", "{} :)", "sooo {}", "{} xD"),
    },
)

_NLI_FILLERS = {
    "who": ("The chef", "A student", "The mayor", "An old man", "The pilot", "A nurse",
            "Two children", "The band", "A farmer", "The lawyer"),
    "act": ("cooked dinner for the guests", "walked to the station", "signed the agreement",
            "painted the fence", "read the letter aloud", "planted tomatoes", "fixed the roof",
            "sang at the festival"),
    "place": ("in the morning", "last Tuesday", "before noon", "in the rain", "at the market",
              "near the river"),
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
        ),
        "neutral": (
            "{who} {act} {place}. -> {who} was paid well for it.",
            "{who} {act} {place}. -> It was the first time {who} had done so.",
            "{who} {act} {place}. -> A crowd gathered to watch.",
        ),
        "contradiction": (
            "{who} {act} {place}. -> Nobody {act} {place}.",
            "{who} {act} {place}. -> {who} stayed home and did nothing at all.",
            "{who} {act} {place}. -> {who} refused to do anything {place}.",
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
               "My flatmate", "The head chef", "Her cousin", "The ferry captain", "Our vicar"),
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
        ),
    },
    fillers=_METAPHOR_FILLERS,
    wrappers=("{}", "Statement and reading: {}", "{} (from a story)", "{} (overheard at dinner)"),
)

_APP_FILLERS = {
    "app": ("the photo editor", "this calendar app", "the banking app", "this keyboard",
            "the weather widget", "this music player", "the notes app", "the fitness tracker",
            "this launcher", "the file manager"),
    "feat": ("the sync", "the dark mode", "the search", "the widgets", "the backup",
             "the notifications", "the latest update", "the layout"),
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
        ),
        "negative": (
            "{app} keeps crashing since {feat} changed. Uninstalled",
            "Terrible, {feat} never works and support ignores me",
            "{app} drains my battery and {feat} is broken. One star",
            "Worst update ever, {feat} deleted my data",
            "Useless, {app} freezes every time I open {feat}",
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
