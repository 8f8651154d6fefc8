//go:build !darwin

package keyring

// platformLimit returns the longest value an item can hold: 2,560 bytes, the
// Credential Manager's limit on Windows. The Secret Service has no such
// limit, but using Windows's everywhere but macOS gives one layout, and the
// chunking Windows needs is what the Linux tests exercise.
func platformLimit(service, account string) int {
	return 2560
}
