//go:build !linux

package client

func newOSTimer(func()) osTimer { return nil }
