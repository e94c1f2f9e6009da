package httpapi

// SetTestHookBeforeAnswer sets the hook that runs between reading a card's
// answer and handing it to the port; the returned func removes it.
func SetTestHookBeforeAnswer(f func(n int)) func() {
	testHookBeforeAnswer = f
	return func() { testHookBeforeAnswer = nil }
}
