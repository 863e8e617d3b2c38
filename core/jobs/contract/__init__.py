"""What a job is asked to do and what it needs from a model: its options (spec.py) and the closed
sets they choose from (choices.py), and the protocols a model meets (interfaces.py). The lowest
folder of qtts.core.jobs: it imports nothing of the folders above, and no torch."""
