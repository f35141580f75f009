package sample

type notInTests struct {
	// X is not read: a test file.
	X int
}
