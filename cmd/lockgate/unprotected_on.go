//go:build lockgate_unprotected

package main

// unprotectedBuild is true in the fault-injection suite's build (the
// lockgate_unprotected tag), where LOCKGATE_UNSAFE_NO_LOSS_PROTECTION=1
// turns the data-loss protection off (see unprotectedMode).
const unprotectedBuild = true
