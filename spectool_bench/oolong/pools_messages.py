"""Instance pools of people's own messages: ``imdb`` (movie reviews), ``spam`` (SMS
messages, spam or ham) and ``app_reviews`` (app store reviews). The label is the
message's tone or intent; the label word never appears in its text (see :mod:`.pools`).
"""

from __future__ import annotations

from .dataset import Dataset

__all__ = ["IMDB", "SPAM", "APP_REVIEWS"]


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
    "who": ("my partner", "my brother", "the whole family", "a friend from work", "my kids",
            "my grandmother", "the film club", "my flatmate", "two colleagues", "my sister"),
    "when": ("on a rainy Sunday", "at a midnight screening", "on a long flight",
             "after a hard week", "at the local cinema", "on opening night", "on a streaming whim",
             "at a festival", "on a school night", "during the holidays"),
}
IMDB = Dataset.from_text("imdb", "movie reviews", """
    [negative]
    I went in with high hopes and {film} turned out to be {scorn}; {part} alone ruined it.
    {film} is {scorn}. I walked out after {n} scenes because {part} made no sense.
    Hated it. {part} in {film} is {scorn} and I want my money back.
    What a letdown: {film} is {scorn}, and {part} should never have been approved.
    One out of ten. {film} is {scorn} and {part} is the worst I have seen this year.
    Watched {film} with {who} {when}; {part} had us checking our phones and {film} is {scorn}.
    I rarely write reviews, but {film} is {scorn}. {part} felt like an afterthought.
    Saw {film} {when} and it was {scorn}; {who} fell asleep before {part} even started.
    Nothing in {film} earns its place. {part} is {scorn}, and {who} agreed.
    If {part} is anything to go by, nobody cared: {film} is {scorn}.
    [positive]
    I went in with low expectations and {film} turned out to be {praise}; {part} alone is reason enough to go.
    {film} is {praise}. I have seen it {n} times and {part} still gets me.
    Loved it. {part} in {film} is {praise} and I will recommend it to everyone.
    What a surprise: {film} is {praise}, and {part} deserves every award it gets.
    Ten out of ten. {film} is {praise} and {part} is the best I have seen this year.
    Watched {film} with {who} {when}; {part} had us all cheering and {film} is {praise}.
    I rarely write reviews, but {film} is {praise}. {part} stayed with me for days.
    Saw {film} {when} and it was {praise}; {who} wants to go again because of {part}.
    Every scene of {film} earns its place. {part} is {praise}, and {who} agreed.
    If {part} is anything to go by, the director is a talent: {film} is {praise}.
""",
    fillers=_REVIEW_FILLERS,
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
SPAM = Dataset.from_text("spam", "text messages", """
    [ham]
    Hey {name}, u still coming to {place} at {time}?
    Can you grab {thing} on your way back from {place}
    Running late, be at {place} {time}. Sorry!!
    {name} says hi. Did you find {thing}?
    Ok see you at {place} then. Dont forget {thing} lol
    Just got to {place}, where r u? Call me {time}
    Thanks for {thing} yesterday, {name} loved it
    I left {thing} at {place}, can u check {time}?
    [spam]
    URGENT! You have won {prize}. Text {code} to {num} now. {fee}/msg
    Congratulations! Your number was selected for {prize}. Call {num} to collect. T&Cs apply
    FREE entry to our weekly draw for {prize}! Txt {code} to {num}. Cost {fee} per week
    Final notice: {prize} is waiting for you. Reply {code} before midnight. {fee}/min
    You are a WINNER! Claim {prize} today by texting {code} to {num}
    Exclusive offer: {prize} for loyal customers. Send {code} to {num}, {fee} per txt
    Your mobile account is due an upgrade plus {prize}. Call {num} free now
    Last chance! {prize} reserved in your name. Text {code} to {num} to opt in
""",
    fillers=_SMS_FILLERS,
    tails=("", " x", " :)", " ok?", " !", " xx", " ;)", " .."),
    wrappers=("{}", "Fwd: {}", "{} (sent from my phone)", "RE: {}", "{} [1/1]", "Msg: {}"),
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
APP_REVIEWS = Dataset.from_text("app_reviews", "reviews of software applications", """
    [negative]
    {app} keeps crashing since {feat} changed. Uninstalled
    Terrible, {feat} never works and support ignores me
    {app} drains my battery and {feat} is broken. One star
    Worst update ever, {feat} deleted my data
    Useless, {app} freezes every time I open {feat}
    Used {app} for {days} and {feat} still fails every single time
    {feat} in {app} is a mess, please fix it
    Gave {app} {days} to improve, {feat} only got worse
    [positive]
    Love {app}, {feat} works perfectly. Five stars
    Great app! {feat} is fast and simple
    {app} does exactly what I need and {feat} is brilliant
    Best one I have tried, {feat} saves me so much time
    Really useful, {app} never lets me down. Thanks devs
    Been using {app} for {days} and {feat} keeps getting better
    {feat} in {app} is so smooth, worth every penny
    Switched to {app} {days} ago, {feat} is miles ahead of the rest
""",
    fillers=_APP_FILLERS,
    tails=("", " (phone model: Pixel)", " - on Android 12", " via the store app", " #review", " :/",
           " ...", " (3rd review)"),
    wrappers=("{}", "{}!", "Update: {}", "{} - edited after a week", "Honestly, {}", "{} (on my tablet)",
              "{}. Version 2.3", "After two months of use: {}"),
)
