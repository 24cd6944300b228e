package stream

// ClockSkew is clockSkew, for the tests of the stream_test package.
const ClockSkew = clockSkew
