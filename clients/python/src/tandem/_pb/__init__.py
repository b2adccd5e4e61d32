"""The coordinator's gRPC stubs, generated from api/tandem.proto when the
package is built (setup.py); never committed."""
