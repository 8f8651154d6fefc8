//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// privateStateDir makes sure that no one but the OS user can write dir,
// the keystore's directory, nor replace it, as ssh insists for ~/.ssh:
// whoever can write there can swap the keystore (and with it the agent's
// keys and the User's sign-ins) for one of their own. The default
// directory (poppy under the config directory, ours) is made 0700 when it
// is the User's own and others can write it; a directory named by --state
// is not changed but refused, unless it has the sticky bit (as /tmp does),
// where others can't replace what is ours. A parent that others can write
// (without the sticky bit) is refused in either case.
func privateStateDir(dir string, ours bool, warn func(string)) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("poppy: %w", err)
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// sqlitestore creates it, 0700.
		return checkParent(filepath.Dir(dir))
	}
	if err != nil {
		return fmt.Errorf("poppy: the keystore's directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("poppy: %s is not a directory", dir)
	}
	if err := checkParent(filepath.Dir(dir)); err != nil {
		return err
	}
	mode := fi.Mode()
	if mode.Perm()&0o022 == 0 {
		return nil
	}
	mine := ownedByMe(fi)
	switch {
	case ours && mine:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("poppy: making the keystore's directory private: %w", err)
		}
		warn(fmt.Sprintf("poppy: others could write the keystore's directory %s (mode %04o); it is now 0700", dir, mode.Perm()))
		return nil
	case !ours && mine && mode&fs.ModeSticky != 0:
		return nil
	}
	who := "others"
	if !mine {
		who = "its owner, another user, and others"
	}
	return &hintError{code: exitError,
		err:  fmt.Errorf("poppy: %s can write the keystore's directory %s (mode %04o)", who, dir, mode.Perm()),
		hint: fmt.Sprintf("make it yours alone (chmod go-w %s), or choose another --state", shellQuote(dir))}
}

// checkParent refuses a parent of the keystore's directory that others
// can write without the sticky bit: they could put a directory of their
// own in its place.
func checkParent(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil // the keystore's open reports it
	}
	mode := fi.Mode()
	if mode.Perm()&0o022 == 0 || mode&fs.ModeSticky != 0 {
		return nil
	}
	return &hintError{code: exitError,
		err:  fmt.Errorf("poppy: others can write %s (mode %04o), where the keystore's directory is", dir, mode.Perm()),
		hint: fmt.Sprintf("make it writable by its owner alone (chmod go-w %s), or choose another --state", shellQuote(dir))}
}

func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
