package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/fleet-go/fleet"
)

// readKeyFile reads a Keyring from path (--keys): one key per line, "<id>
// <base64 of its 32 bytes>", the newest first; blank lines and lines that
// begin with # are skipped. fleetctl only opens with it (Options.OpenWith).
func readKeyFile(path string) (*fleet.Keyring, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--keys: %w", err)
	}
	defer fh.Close()
	var ks []fleet.Key
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, secret, ok := strings.Cut(line, " ")
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
		if !ok || err != nil {
			return nil, fmt.Errorf("--keys %s: line %d: want '<id> <base64 of 32 bytes>'", path, n)
		}
		ks = append(ks, fleet.Key{ID: id, Secret: b})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--keys %s: %w", path, err)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("--keys %s: no key in the file", path)
	}
	kr, err := fleet.NewKeyring(ks[0], ks[1:]...)
	if err != nil {
		return nil, fmt.Errorf("--keys %s: %w", path, err)
	}
	return kr, nil
}

// shownJSON is a stored value as a table shows it: "sealed (key <id>)"
// for one fleetctl could not open, else its JSON.
func shownJSON(raw []byte) string {
	if id, ok := fleet.SealedKeyID(raw); ok {
		return "sealed (key " + id + "; --keys opens it)"
	}
	return string(raw)
}
