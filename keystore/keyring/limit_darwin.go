package keyring

import "strings"

// platformLimit returns the longest value an item can hold. go-keyring
// passes the Keychain one command line of at most 4,096 bytes,
//
//	add-generic-password -U -s SERVICE -a ACCOUNT -w go-keyring-base64:BASE64\n
//
// with each argument shell-quoted and the value in base64, so what fits
// depends on the lengths of the service and the account.
func platformLimit(service, account string) int {
	const command = 4096
	fixed := len("add-generic-password -U -s  -a  -w go-keyring-base64:\n") + 2 // quotes
	room := command - fixed - quotedLen(service) - quotedLen(account)
	if room < 4 {
		return 0
	}
	return room / 4 * 3
}

// quotedLen bounds the length of s once shell-quoted: in single quotes, each
// single quote inside written as '"'"'.
func quotedLen(s string) int {
	return len(s) + 2 + 4*strings.Count(s, "'")
}
