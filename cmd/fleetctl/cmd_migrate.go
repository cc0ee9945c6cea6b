package main

// migrate is wired here by the lead once fleet's Migrate lands: register a
// *command named "migrate" in an init function, as cmd_sync.go does (flags
// such as --to compat|tagged and --dry-run; a progress indicator through
// a.tty; exit 1 on error). Nothing else in fleetctl needs to change.
