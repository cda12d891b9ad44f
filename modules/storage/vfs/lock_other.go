//go:build !unix

package vfs

import (
	"errors"
	"fmt"
	"io"
)

// Lock implements FS. Only unix systems have flock(2); elsewhere it fails
// with an error wrapping errors.ErrUnsupported.
func (OS) Lock(name string) (io.Closer, error) {
	return nil, fmt.Errorf("lock %s: %w", name, errors.ErrUnsupported)
}
