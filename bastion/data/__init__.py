"""Prompt sets: the dataset registry, source formats, chat prompts and the shipped offline sets."""
