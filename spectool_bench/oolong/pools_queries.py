"""Instance pools of the question datasets: ``trec_coarse`` (TREC question types) and
``yahoo`` (Yahoo Answers topics). A question's label is what it asks for or what it
is about; the label word never appears in its text (see :mod:`.pools`).
"""

from __future__ import annotations

from .dataset import Dataset

__all__ = ["TREC_COARSE", "YAHOO"]


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

TREC_COARSE = Dataset.from_text("trec_coarse", "questions", """
    [abbreviation]
    What does {acr} stand for?
    What is the full form of {acr}?
    {acr} is short for what?
    What do the letters in {acr} mean?
    Spell out {acr} for me, what is it?
    What is {acr} an acronym for?
    Expand the letters {acr}, please.
    In full, what is {acr}?
    [entity]
    What instrument did {person} play?
    What kind of animal is on the flag of {country}?
    Which sport is played most in {country}?
    What do you call a baby {animal}?
    What material was {thing} built from?
    What is the national dish of {country}?
    What color is the blood of a {animal}?
    What was the name of the ship in {book}?
    What currency is used in {country}?
    What food did {person} love most?
    Which {sport} club is the oldest in {country}?
    What is the favourite snack of a {animal}?
    [description and abstract concept]
    What is {concept}?
    Why does {phenomenon}?
    How do you {process}?
    What is the meaning of {concept} in everyday life?
    Explain why {phenomenon}.
    What is the difference between {concept} and {concept2}?
    How does a {animal} sleep?
    Why do people say {concept} matters?
    What is a simple way to explain {concept} to a child?
    What makes {phenomenon} happen, scientifically?
    [human being]
    Who invented the {invention}?
    Who wrote {book}?
    Who was the first person to {feat}?
    Who painted the portrait of {person}?
    Who was the teacher of {person}?
    Who designed {thing}?
    What was the name of the wife of {person}?
    Who was the first king of {country}?
    Who translated {book} into English?
    Who coached the national {sport} team of {country}?
    [location]
    Where is {thing}?
    Where was {person} born?
    What country borders {country} to the north?
    Where do {animal}s live in the wild?
    In what city did {event} take place?
    What is the capital of {country}?
    Where can you see {thing} today?
    In which country did {person} die?
    Which city hosted {event}?
    Where did {person} go to school?
    [numeric value]
    How many {measure} are in {container}?
    When did {event} happen?
    How tall is {thing}?
    What year was the {invention} first used?
    How old was {person} at death?
    How fast can a {animal} run?
    How much does {thing} weigh?
    How far is {country} from the equator?
    How long does a {animal} live?
    In what year did {person} die?
    How many people play {sport} in {country}?
""",
    fillers={**_TREC_FILLERS, "concept2": _TREC_FILLERS["concept"]},
    wrappers=("{}", "Quick question - {}", "Trivia night: {}", "{} Thanks in advance.",
              "Can anyone tell me: {}", "Homework help - {}", "{} (for a quiz)",
              "I always wondered: {}", "Pub quiz: {}", "Q. {}", "Settle a bet: {}",
              "{} My teacher asked us this.", "Random thought: {}", "Crossword clue - {}",
              "{} (bonus round)", "Family quiz: {}"),
    tails=("", " Thanks!", " Anyone?", " Just curious.", " I forgot.", " Cheers.",
           " Please reply.", " Asking for my kid.", " No googling!", " Answer fast please."),
)


_YAHOO_FILLERS = {
    "x": ("my neighbour", "my teenage son", "my landlord", "a coworker", "my best mate",
          "my girlfriend", "my dad", "my roommate", "my boss", "my cousin", "my aunt",
          "my husband", "a guy at the gym", "my grandad", "my little brother", "my tutor",
          "my wife", "an old classmate", "my uncle", "the lady next door"),
    "y": ("2", "3", "4", "5", "6", "8", "10", "12", "15", "20"),
}
YAHOO = Dataset.from_text("yahoo", "Yahoo Answers questions", """
    [Society & Culture]
    Why do people throw rice at weddings? {x} asked me and I had no idea.
    What is the origin of the tradition of lanterns at new year? Asking for {x}.
    Is it rude to refuse food at a host's dinner? {x} says it is.
    Why do some religions fast for {y} days? Just curious about the customs.
    Is it ok to wear white to a wedding? {x} did it {y} years ago.
    Why do people tip {y} percent in some countries and nothing in others? {x} asked.
    [Science & Mathematics]
    How do I solve x squared plus {y}x equals zero? My homework is due tomorrow.
    Why does ice float on water? {x} could not explain it.
    What is the derivative of x to the power {y}? Please show the steps.
    How far away is the nearest star in light years? {x} guessed {y}.
    What is {y} factorial and why is it so big? {x} was surprised.
    Why do magnets attract iron? {x} asked me and I blanked.
    [Health]
    I have had a headache for {y} days, should I see a doctor? {x} thinks it's stress.
    Is it bad to sleep only {y} hours a night? I feel tired all day.
    What helps with a sore throat besides tea? {x} swears by honey.
    How many calories should I eat to lose {y} pounds? Any diet tips?
    My knee hurts after running {y} miles, is it serious? {x} says rest it.
    Is drinking {y} coffees a day bad for your heart? {x} drinks more.
    [Education & Reference]
    How do I write a bibliography in APA style? My essay is due in {y} days.
    What does the word 'ubiquitous' mean and how do you use it in a sentence?
    Which college has the best nursing program? {x} is applying next year.
    How do I study for a test in {y} hours without panicking?
    What is the plural of cactus? {x} and I argued for {y} minutes.
    Is it worth doing a masters degree at {y}0? {x} thinks I am too old.
    How do I cite a website in an essay? {x} says footnotes.
    [Computers & Internet]
    My laptop keeps freezing after {y} minutes, how do I fix it? {x} said to reinstall.
    How do I stop pop-ups in my browser? They appear every {y} seconds.
    What is the best free antivirus? {x} got a virus from an email.
    Why is my wifi so slow at night? I pay for {y} megabits.
    How do I recover a deleted file from {y} days ago? {x} deleted it.
    Which laptop is best for coding under {y}00 dollars? {x} wants a Mac.
    [Sports]
    Who will win the World Cup this year? {x} bets on Brazil.
    How do I improve my free throw percentage? I miss {y} out of 10.
    Is it offside if the ball is played backwards? Soccer rules confuse me.
    Which golf club should I use from {y}0 yards out?
    How many laps of a pool is a mile? {x} swims {y} a day.
    Who was the greatest boxer ever? {x} says Ali, I say Tyson.
    How do I get faster at the 100 metres? My best is {y} seconds over 10.
    [Business & Finance]
    Should I pay off my credit card or save {y} percent of my paycheck? {x} says save.
    How do I start a small bakery with little money?
    What is a good stock to buy for {y} years? Thinking of index funds.
    How do I file taxes if I worked {y} part-time jobs last year?
    Is it smart to buy a house with {y} percent down? {x} says wait.
    How do I ask for a raise after {y} years in the same job? {x} never asked.
    [Entertainment & Music]
    What is the name of the song that goes 'la la la' in the car advert? {x} keeps humming it.
    Who is the best guitarist of all time? {x} says Hendrix.
    When does season {y} of that vampire show come out on TV?
    Any good movies like The Matrix? I have watched it {y} times.
    Who sang that 80s song about the rain? {x} has been humming it for {y} days.
    Which band should I see live this summer? {x} has {y} spare tickets.
    [Family & Relationships]
    My boyfriend forgot my birthday again, should I break up? {x} says yes.
    How do I tell my parents I want to move out at {y}?
    {x} keeps borrowing money and never pays back, what do I do?
    Is it normal to argue with your spouse {y} times a week?
    {x} has not called me in {y} weeks, should I reach out first?
    How do I get my {y} year old to sleep through the night? {x} has tips.
    [Politics & Government]
    Why do we have an electoral college instead of a popular vote? {x} disagrees with it.
    Can a senator serve more than {y} terms? How do term limits work?
    What does the vice president actually do all day?
    Should the voting age be lowered to 16? {x} thinks so.
    How does a bill become a law in {y} steps? {x} explained it badly.
    Why do mayors serve {y} year terms? {x} wants them longer.
""",
    fillers=_YAHOO_FILLERS,
    tails=("", " Thanks!", " Cheers.", " (asking for a friend)", " Any ideas?", " Need answers fast.",
           " Be honest.", " Sorry for my english.", " Best answer gets points.", " x"),
    wrappers=("{}", "{} Please help!", "Quick one: {}", "{} Thanks everyone.", "Serious answers only. {}",
              "{} Any advice appreciated.", "Been wondering for ages: {}",
              "{} 10 points for the best answer!", "Help!! {}", "{} Thx in advance",
              "Random question: {}", "{} Please no rude answers."),
)
