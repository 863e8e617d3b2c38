"""What a job is asked (its options and their choices) and what it needs of a model. The lowest
folder of qtts.core.jobs: it imports none of the folders above, and no torch."""
