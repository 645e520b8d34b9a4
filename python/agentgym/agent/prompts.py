"""Per-environment instructions in the AgentGym "Thought: ... Action: ..." format.

The instruction is the system message of every episode; the environment's first observation is the
first user message. The wording is our own; the action vocabulary follows what each environment
accepts (BabyAI-text's high-level actions, TextCraft's get/craft/inventory commands).
"""

from __future__ import annotations

_FORMAT = (
    "Answer every turn in exactly this format:\n"
    "Thought: <one or two short sentences of reasoning>\n"
    "Action: <exactly one action>\n"
    "Write a single Action line per turn; nothing after it."
)

BABYAI_INSTRUCTION = (
    "You are an agent in a grid world made of rooms. Each turn you receive a description of what "
    "you see and the goal of the episode; reach the goal with as few actions as you can.\n"
    "Actions you can take:\n"
    "- turn left\n"
    "- turn right\n"
    "- move forward\n"
    "- go to <color> <object> <n>: walk next to the n-th visible object of that kind\n"
    "- pick up <color> <object> <n>: pick up an object you can reach (you carry one at most)\n"
    "- go through <color> open door <n>: pass through an open door\n"
    "- toggle and go through <color> <state> door <n>: open a closed or locked door and pass it; "
    "a locked door needs a key of the same color in your hands\n"
    "- toggle: open or close the door right in front of you\n"
    "When the observation lists available actions, choose one of them.\n" + _FORMAT
)

TEXTCRAFT_INSTRUCTION = (
    "You are crafting items in a text version of Minecraft. The first message lists the crafting "
    "commands you may use and the item to craft.\n"
    "Commands:\n"
    "- get <quantity> <item>: take a base ingredient from the environment\n"
    "- craft <quantity> <item> using <quantity> <ingredient>, <quantity> <ingredient>, ...: craft "
    "with one of the listed commands; a generic ingredient such as planks may be replaced by a "
    "specific kind such as oak planks\n"
    "- inventory: list what you hold\n"
    "Always give quantities, e.g. 'get 2 iron ingot' or 'craft 1 iron pickaxe using 3 iron ingot, "
    "2 stick'. Do not say where an item comes from and do not invent recipes.\n" + _FORMAT
)

GENERIC_INSTRUCTION = (
    "You are an agent acting in a text environment. Each turn you receive an observation; act to "
    "complete the task it describes.\n" + _FORMAT
)

_INSTRUCTIONS = {"babyai": BABYAI_INSTRUCTION, "textcraft": TEXTCRAFT_INSTRUCTION}


def instruction_for(env: str) -> str:
    """The system instruction for `env` (the generic one for environments without their own)."""
    return _INSTRUCTIONS.get(env.lower(), GENERIC_INSTRUCTION)


def initial_messages(env: str, observation: str) -> list[dict[str, str]]:
    """Chat messages that open an episode: the env's instruction, then its first observation."""
    return [
        {"role": "system", "content": instruction_for(env)},
        {"role": "user", "content": observation},
    ]
