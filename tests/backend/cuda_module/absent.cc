// A library that the fake module needs and the loader cannot find (it is off every run path).
extern "C" int gemmax_fake_absent() { return 1; }
