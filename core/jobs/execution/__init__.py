"""Running a job: preparing it, recording it in the out dir, the locked run, the dry run, the local
and Ray backends, signals, the summary. The top folder of qtts.core.jobs: it may import them all."""
