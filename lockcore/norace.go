//go:build !race

package lockcore

// raceBuild: built with -race (see keptCallers).
const raceBuild = false
