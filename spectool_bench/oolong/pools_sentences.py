"""Instance pools of sentences labelled by their meaning or style: ``agnews`` (news
topics), ``negation`` (true or false kind claims), ``formality``, ``multinli``
(entailment of sentence pairs) and ``metaphors`` (figurative or literal). The label
word never appears in the text (see :mod:`.pools`).
"""

from __future__ import annotations

from .dataset import Dataset

__all__ = ["AGNEWS", "NEGATION", "FORMALITY", "MULTINLI", "METAPHORS"]


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
AGNEWS = Dataset.from_text("agnews", "short news articles", """
    [World]
    Talks collapse in {country}. {leader} walked out of the meeting on Tuesday, officials said.
    Clashes leave dozens dead in {country}. Troops were sent after {leader} called for calm.
    {country} votes amid tension. Observers say {leader} face a tight race.
    Aid reaches flood victims in {country}. {leader} promised further help.
    Embassy attacked in {country}. {leader} condemned the assault and closed the border.
    [Sports]
    {team} rally late to win. {athlete} scored twice as the visitors held on.
    {athlete} withdraws with injury. {team} will start the season without a key player.
    {team} clinch the title. Fans celebrated after {athlete} sealed the final game.
    {athlete} sets a new record. The crowd rose as {team} lost in the semifinal.
    Coach fired after {team} slump. {athlete} said the squad had lost its way.
    [Business]
    {firm} profit jumps {pct} percent. Shares rose as quarterly sales beat forecasts.
    {firm} to cut jobs. The company said costs had risen {pct} percent this year.
    Oil prices climb {pct} percent. {firm} warned that fuel costs would squeeze margins.
    {firm} agrees to buy a rival. The deal values the target at a {pct} percent premium.
    Stocks slide on rate fears. {firm} led the decline, falling {pct} percent.
    [Sci/Tech]
    {lab} unveils {gadget}. The device could reach shops by next spring.
    {lab} reports progress on {gadget}. Tests showed a {pct} percent gain in speed.
    Hackers target {lab}. A flaw in {gadget} left millions of users exposed.
    {lab} launches {gadget}. Engineers hope it will map distant planets.
    Open-source rival to {gadget} gains ground. {lab} says it will respond soon.
""",
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
NEGATION = Dataset.from_text("negation", "sentences", """
    [True]
    {hold_m}.
    {hold_n}.
    [False]
    {fail_m}.
    {fail_n}.
""",
    fillers=_CLAIM_FILLERS,
    wrappers=("{}", "Claim: {}", "{} (quiz item)", "Statement: {}", "Fact check: {}",
              "{} (from a worksheet)", "Assertion: {}", "{} (heard in class)"),
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
FORMALITY = Dataset.from_text("formality", "sentences", """
    [formal]
    We regret to inform you that {topic} has been postponed until further notice.
    {body} has reviewed {topic} and will issue its recommendations {when}.
    Please find attached a summary of {topic} for your consideration {when}.
    It is the considered opinion of {body2} that {topic} warrants further examination.
    Kindly direct any inquiries regarding {topic} to {body2} {when}.
    In accordance with established procedure, {topic} shall be circulated {when}.
    {body} wishes to acknowledge receipt of {topic} and will respond {when}.
    Members are requested to review {topic} and submit their observations {when}.
    {body} has resolved that {topic} be deferred and reconsidered {when}.
    [informal]
    {slang} {thing} was soooo good, u gotta check it out
    cant believe {thing} did that {slang}, {mate} is {feel}
    yo did u see {thing}?? {slang}
    {thing} is kinda meh tbh, not gonna lie {slang}
    ugh {thing} again... whatever {slang}
    me and {mate} totally loved {thing} {slang}
    {mate} showed me {thing} and im {feel} {slang}
    not {thing} making me {feel} again {slang}
    {thing} rn >>> everything, {mate} agrees {slang}
""",
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
MULTINLI = Dataset.from_text("multinli", "pairs of sentences", """
    [entailment]
    {who} {act} {place}. -> Someone {act}.
    {who} {act} {place}. -> Something happened {place}.
    {who} {act} with great care {place}. -> {who} {act}.
    {who} {act} {place} and then left. -> {who} {act} before leaving.
    [neutral]
    {who} {act} {place}. -> {who} was paid well for it.
    {who} {act} {place}. -> It was the first time {who} had done so.
    {who} {act} {place}. -> A crowd gathered to watch.
    {who} {act} {place}. -> {who} was in a hurry.
    [contradiction]
    {who} {act} {place}. -> Nobody {act} {place}.
    {who} {act} {place}. -> {who} stayed home and did nothing at all.
    {who} {act} {place}. -> {who} refused to do anything {place}.
    {who} {act} {place}. -> {who} was abroad and never {act}.
""",
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
METAPHORS = Dataset.from_text("metaphors", "pairs of sentences", """
    [correct]
    {person} is a rock. <--> {person} is dependable and steady.
    {person} has a heart of gold. <--> {person} is very kind.
    {person} is a night owl. <--> {person} stays up late.
    {person} is drowning in paperwork. <--> {person} has too many documents to handle.
    {person} got cold feet. <--> {person} became nervous and hesitated.
    {person} is a walking encyclopedia. <--> {person} knows a great many facts.
    {person} has a green thumb. <--> {person} is good at growing plants.
    {person} is on cloud nine. <--> {person} is extremely happy.
    {person} spilled the beans. <--> {person} revealed a secret.
    {person} is a couch potato. <--> {person} spends a lot of time sitting and watching TV.
    {person} broke the ice. <--> {person} eased the tension at the start of the meeting.
    {person} has butterflies in the stomach. <--> {person} feels nervous.
    {person} is a bookworm. <--> {person} loves reading.
    {person} hit the books. <--> {person} studied hard.
    {person} has a memory like a sieve. <--> {person} forgets things easily.
    {person} is the black sheep of the family. <--> {person} is the odd one out among relatives.
    {person} let the cat out of the bag. <--> {person} told everyone the plan by accident.
    {person} is a fish out of water. <--> {person} feels out of place.
    [incorrect]
    {person} is a rock. <--> {person} is made of stone.
    {person} has a heart of gold. <--> {person} had surgery with metal parts.
    {person} is a night owl. <--> {person} is a bird with feathers.
    {person} is drowning in paperwork. <--> {person} fell into a pool of water.
    {person} got cold feet. <--> {person} forgot to wear socks in winter.
    {person} is a walking encyclopedia. <--> {person} is a printed book on legs.
    {person} has a green thumb. <--> {person} painted a finger green.
    {person} is on cloud nine. <--> {person} is flying in an airplane.
    {person} spilled the beans. <--> {person} knocked over a tin of beans.
    {person} is a couch potato. <--> {person} is a vegetable lying on a sofa.
    {person} broke the ice. <--> {person} smashed a frozen pond with a hammer.
    {person} has butterflies in the stomach. <--> {person} swallowed some insects.
    {person} is a bookworm. <--> {person} is a worm that lives in books.
    {person} hit the books. <--> {person} punched a pile of books.
    {person} has a memory like a sieve. <--> {person} has a kitchen strainer for a brain.
    {person} is the black sheep of the family. <--> {person} is a dark-wooled farm animal.
    {person} let the cat out of the bag. <--> {person} opened a sack holding a cat.
    {person} is a fish out of water. <--> {person} is a fish flopping on the shore.
""",
    fillers=_METAPHOR_FILLERS,
    wrappers=("{}", "Statement and reading: {}", "{} (from a story)", "{} (overheard at dinner)",
              "Line and gloss: {}", "{} (from a school essay)", "Sentence pair: {}",
              "{} (from a letter)", "Quote and meaning: {}", "{} (from a novel)",
              "{} (heard on the radio)", "Saying and paraphrase: {}"),
)
