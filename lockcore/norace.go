//go:build !race

package lockcore

// raceBuild: built with -race (see callers).
const raceBuild = false
