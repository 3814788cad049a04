//go:build !unix

package yamlfile

import "os"

// openFlags: where there is no O_NONBLOCK, the check before the open is
// what refuses a pipe.
const openFlags = os.O_RDONLY
