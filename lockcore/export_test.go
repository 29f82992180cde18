package lockcore

// Settle waits until the late answers of r's decided calls have been acted
// on, so that a test reads the nodes as the calls left them. A call is
// answered at the first quorum once the others have had a grace (see
// round.until): under load a healthy node can take longer than that, and
// its part may not be done yet when the call returns.
func Settle(r *Redlock) { r.bg.wait() }
