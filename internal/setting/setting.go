// Package setting lets library code say which of a coordinator's settings
// it refuses without knowing how the setting was given — a command-line
// flag, a key of the config file, or a field of server.Options — so that
// the command line can say it in the user's words and add what to do.
//
// Library errors stay short: what is wrong and why it matters, wrapped in an
// *Error that names the setting by its config-file key. The remedy, which
// names flags, belongs to the command (cmd/tandem's remedy table).
package setting

import "fmt"

// Name is a setting's key in the coordinator's config file (README, "Config
// file"); a setting that only a flag sets is named by that flag without its
// dashes.
type Name string

// The settings whose refusals the command line explains.
const (
	Listen            Name = "listen"
	Admin             Name = "admin"
	DataDir           Name = "data_dir"
	StandbyListen     Name = "standby.listen"
	StandbyOf         Name = "standby.of"
	StandbyPeer       Name = "standby.peer"
	StandbyTransport  Name = "standby.transport"
	StandbyProtection Name = "standby.protection"
	StandbySecretFile Name = "standby.secret_file"
	// StandbyTLS stands for standby.tls_cert, standby.tls_key and
	// standby.tls_ca, which are given together.
	StandbyTLS Name = "standby.tls_cert/tls_key/tls_ca"
)

// Error reports a setting whose value is refused. Err says what is wrong,
// usually a sentinel of the refusing package, so callers can tell refusals
// apart with errors.Is.
type Error struct {
	Setting Name
	Value   string // as given; empty when the setting is missing
	Err     error
}

// Error names the setting by its config-file key, then its value, then
// what is wrong.
func (e *Error) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %v", e.Setting, e.Err)
	}
	return fmt.Sprintf("%s %s: %v", e.Setting, e.Value, e.Err)
}

// Unwrap returns what is wrong.
func (e *Error) Unwrap() error { return e.Err }

// Refuse wraps err as a refusal of setting's value.
func Refuse(s Name, value string, err error) *Error {
	return &Error{Setting: s, Value: value, Err: err}
}
