"""The jokes, by category and style."""

from __future__ import annotations

JOKES: dict[str, dict[str, tuple[str, ...]]] = {
    "programming": {
        "pun": (
            "Why do programmers prefer dark mode? Because light attracts bugs.",
            "I'd tell you a UDP joke, but you might not get it.",
        ),
        "dad-joke": (
            "Why did the developer go broke? Because he used up all his cache.",
            "How many programmers does it take to change a light bulb? None, "
            "that's a hardware problem.",
        ),
        "one-liner": (
            "There are 10 kinds of people: those who read binary and those who don't.",
            "It works on my machine. Ship the machine.",
        ),
    },
    "llama": {
        "pun": (
            "What do you call a llama with no legs? A woolly rug.",
            "Llamas never panic. They stay calm and llama on.",
        ),
        "dad-joke": (
            "Why did the llama get a ticket? He was caught llama-dawdling in traffic.",
            "What's a llama's favourite drink? Llama-nade.",
        ),
        "one-liner": (
            "Alpaca my bags; the llama is driving.",
            "No prob-llama.",
        ),
    },
    "animals": {
        "pun": (
            "What do you call a sleeping dinosaur? A dino-snore.",
            "Why are cats bad storytellers? They only have one tail.",
        ),
        "dad-joke": (
            "What do you call a dog magician? A labracadabrador.",
            "Why don't elephants use computers? They're afraid of the mouse.",
        ),
        "one-liner": (
            "My dog used to chase people on a bike. I had to take his bike away.",
            "A cat walks into a bar. It knocks a glass off it.",
        ),
    },
    "food": {
        "pun": (
            "I'm on a seafood diet. I see food and I eat it.",
            "Why did the tomato blush? It saw the salad dressing.",
        ),
        "dad-joke": (
            "What do you call a fake noodle? An impasta.",
            "Why did the cookie go to the doctor? It felt crummy.",
        ),
        "one-liner": (
            "Recipes are just suggestions. So are smoke alarms.",
            "I told my pizza a secret. Now it's all over town, with extra cheese.",
        ),
    },
    "default": {
        "pun": (
            "I used to be a banker, but I lost interest.",
            "Time flies like an arrow; fruit flies like a banana.",
        ),
        "dad-joke": (
            "I'm reading a book about anti-gravity. It's impossible to put down.",
            "Why don't skeletons fight each other? They don't have the guts.",
        ),
        "one-liner": (
            "I told my wifi we needed to talk. It stopped responding.",
            "Parallel lines have so much in common. It's a shame they'll never meet.",
        ),
    },
}
