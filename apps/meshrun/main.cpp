#include <cstdio>
int main() { std::puts("meshtrain"); return 0; }
