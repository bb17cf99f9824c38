#include <cstdio>
int main() { std::puts("gemmax"); }
