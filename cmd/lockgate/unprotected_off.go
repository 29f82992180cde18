//go:build !lockgate_unprotected

package main

// unprotectedBuild is false in every build but the fault-injection suite's
// (the lockgate_unprotected tag): the gateway cannot be run with the
// data-loss protection off.
const unprotectedBuild = false
