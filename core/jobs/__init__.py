"""One dataset job end to end, without torch: read and validate rows, lock the out dir, resume,
hand requests to a synthesizer (qtts.core.jobs.contract.interfaces protocols), write files
atomically, journal every row, rebuild results, react to signals. Imports no torch, so validation
and `qtts --help` stay fast and the layer is testable with fakes.

Its folders are layered, bottom first: contract, state, rows, output, long_text, work, execution;
a module imports from its own folder or one below (docs/architecture.md,
"What each layer may know")."""
