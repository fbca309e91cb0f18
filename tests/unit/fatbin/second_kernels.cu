// Second translation unit of the linked test program: its .nv_fatbin then holds several
// containers back to back.

__global__ void tallySecond(double* values) { values[threadIdx.x] = 2.0; }

int main() { return 0; }
