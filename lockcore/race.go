//go:build race

package lockcore

// raceBuild: built with -race, where rounds start a goroutine per node call
// instead of handing calls to kept goroutines (see keptCallers).
const raceBuild = true
